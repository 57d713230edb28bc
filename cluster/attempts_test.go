package cluster

import (
	"math"
	"testing"
	"time"
)

// An agent's reported run time dates a start or an end only when it is a
// duration at all: zero, negative and overflowing values are ignored
// rather than moving a date past the commit or before the epoch.
func TestAgentMillis(t *testing.T) {
	for _, c := range []struct {
		ms   int64
		want time.Duration
		ok   bool
	}{
		{-5, 0, false},
		{0, 0, false},
		{1, time.Millisecond, true},
		{1500, 1500 * time.Millisecond, true},
		{int64(math.MaxInt64 / time.Millisecond), time.Duration(math.MaxInt64/time.Millisecond) * time.Millisecond, true},
		{int64(math.MaxInt64/time.Millisecond) + 1, 0, false},
		{math.MaxInt64, 0, false},
	} {
		got, ok := agentMillis(c.ms)
		if got != c.want || ok != c.ok {
			t.Errorf("agentMillis(%d) = %v, %v; want %v, %v", c.ms, got, ok, c.want, c.ok)
		}
	}
}
