package test

import (
	"flag"
	"os"
	"testing"
	"time"
)

// suiteTimeout replaces go test's default timeout of 10 minutes for this
// package's binary: its clusters, real processes and chaos schedules take
// 9 to 11 minutes on two loaded cores, and a hang is still caught. Any
// other -timeout given wins (go test passes its default to the test
// binary as if it were given, so 10m itself cannot be told from it). The
// go command itself still stops a binary a minute past its own -timeout,
// so .ci/run passes -timeout 30m.
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
