package cluster

import (
	"testing"
	"time"
)

// Refusals of one node are written at most once per refusalEvery; the
// next record counts those folded into it; nodes do not hold each other
// back.
func TestRefusalLimiterFoldsBursts(t *testing.T) {
	var l refusalLimiter
	t0 := time.Unix(1000, 0)
	steps := []struct {
		node   string
		at     time.Duration
		ok     bool
		folded int
	}{
		{"n1", 0, true, 0},
		{"n1", 100 * time.Millisecond, false, 0},
		{"n2", 200 * time.Millisecond, true, 0},
		{"n1", 300 * time.Millisecond, false, 0},
		{"n1", time.Second + time.Millisecond, true, 2},
		{"n1", 3 * time.Second, true, 0},
	}
	for i, s := range steps {
		ok, folded := l.allow(s.node, t0.Add(s.at))
		if ok != s.ok || folded != s.folded {
			t.Fatalf("step %d (%s at %v): allow %v folded %d, want %v %d", i, s.node, s.at, ok, folded, s.ok, s.folded)
		}
	}
}
