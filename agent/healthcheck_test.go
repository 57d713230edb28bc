package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The built-in health check runs sh the way tasks find it: an agent
// whose tasks cannot find sh in their PATH fails its check, saying so,
// though /bin/sh exists; with sh in the PATH it passes.
func TestBuiltInHealthCheckExercisesWhatTasksNeed(t *testing.T) {
	a := agentForTest(t, "rlimit", newRlimits)
	empty := t.TempDir()
	t.Setenv("PATH", empty)
	ok, out := a.healthCheck(context.Background())
	if ok || !strings.Contains(out, "a task's command cannot start: sh") {
		t.Fatalf("sh missing from the tasks' PATH: passed %v, %q", ok, out)
	}
	t.Setenv("PATH", "/usr/bin:/bin")
	a.paths = pathCache{now: a.paths.now}
	if ok, out := a.healthCheck(context.Background()); !ok || !strings.Contains(out, "a shell task runs") {
		t.Fatalf("healthy node: passed %v, %q", ok, out)
	}
	entries, _ := os.ReadDir(a.cfg.DataDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".herd-health") {
			t.Fatalf("check left %s behind", filepath.Join(a.cfg.DataDir, e.Name()))
		}
	}
	// A data directory that takes no write fails the check.
	if os.Geteuid() != 0 {
		if err := os.Chmod(a.cfg.DataDir, 0o500); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(a.cfg.DataDir, 0o700)
		if ok, out := a.healthCheck(context.Background()); ok || !strings.Contains(out, "data directory not writable") {
			t.Fatalf("read-only data directory: passed %v, %q", ok, out)
		}
	}
}

// A figure is its samples' median, and the spread their range over it:
// one disturbed sample moves the spread, not the figure.
func TestMedianSpread(t *testing.T) {
	if m, s := medianSpread([]int64{100, 7351, 98, 102, 101}); m != 101 || s != (7351-98)*100/101 {
		t.Fatalf("median %d spread %d", m, s)
	}
	if m, s := medianSpread([]int64{0, 0, 0}); m != 0 || s != 0 {
		t.Fatalf("zeros: %d %d", m, s)
	}
}

// A measurement reports its rounds and spreads; on an idle machine the
// figures are positive and the rounds within the bound.
func TestMeasureReportsRoundsAndSpread(t *testing.T) {
	p := Measure(t.TempDir(), false)
	if !p.Benchmarked || p.CPUScore <= 0 || p.MemoryMBps <= 0 || p.Rounds < 1 || p.Rounds > benchMaxRounds || p.CPUSpreadPct < 0 {
		t.Fatalf("profile %+v", p)
	}
}
