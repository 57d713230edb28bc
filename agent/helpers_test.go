package agent

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"herd/internal/steady"
)

// limitMethodsForTest are the limit methods runProcess is measured and
// tested under; those this machine lacks are skipped.
var limitMethodsForTest = []struct {
	name string
	make func() (limiter, error)
}{
	{"none", func() (limiter, error) { return noLimits{}, nil }},
	{"rlimit", newRlimits},
	{"cgroup-v1", newCgroupV1},
}

// agentForTest is an agent that can run attempts (runProcess) under the
// limiter mk makes, with its data in a temporary directory; it skips
// where the limiter is unavailable.
func agentForTest(tb testing.TB, name string, mk func() (limiter, error)) *Agent {
	tb.Helper()
	lim, err := mk()
	if err != nil {
		tb.Skipf("%s unavailable: %v", name, err)
	}
	if pool, ok := lim.(interface{ drain() }); ok {
		tb.Cleanup(pool.drain) // cgroup v1 keeps idle groups to reuse
	}
	cfg := Config{ID: "test", DataDir: tb.TempDir()}.WithDefaults()
	a := &Agent{cfg: cfg, logger: hclog.NewNullLogger(), limiter: lim, paths: pathCache{now: time.Now}, workDirs: newWorkDirs(filepath.Join(cfg.DataDir, "work")), clock: steady.New(nil, nil)}
	a.conditions = newConditionWatch(a)
	return a
}
