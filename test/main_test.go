package test

import (
	"flag"
	"os"
	"testing"
	"time"
)

// suiteTimeout replaces go test's default timeout of 10 minutes for this
// package alone: its clusters, real processes and chaos schedules take
// about 9 minutes on two loaded cores, and a hang is still caught. Any
// other -timeout given wins (go test passes its default to the test
// binary as if it were given, so 10m itself cannot be told from it).
const suiteTimeout = 30 * time.Minute

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil && d == 10*time.Minute {
			_ = flag.Set("test.timeout", suiteTimeout.String())
		}
	}
	os.Exit(m.Run())
}
