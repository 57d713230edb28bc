package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"herd/api"
	"herd/internal/steady"
)

// The janitor removes what attempts left behind once it is older than the
// retention: logs (rotated ones too) and working directories, and task
// log directories of older agents, but nothing of a running attempt and
// no directory the agent keeps for reuse.
func TestPruneAttemptFilesKeepsRunningAttempts(t *testing.T) {
	dir := t.TempDir()
	a := &Agent{cfg: Config{DataDir: dir}, workDirs: newWorkDirs(filepath.Join(dir, "work")), running: map[string]*execution{
		"att-run": {assignment: api.Assignment{Attempt: api.Attempt{ID: "att-run", TaskID: "task-run"}}},
	}}
	old := time.Now().Add(-2 * time.Hour)
	write := func(rel string) string {
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("x"), 0o640); err != nil {
			t.Fatal(err)
		}
		for p := path; p != dir; p = filepath.Dir(p) {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
		return path
	}
	pooled := write("work/att-pooled/.keep") // stands for an idle pooled directory, however old
	a.workDirs.pooled["att-pooled"] = true
	kept := []string{
		pooled, write("logs/att-run.log"), write("logs/att-run.log.1"), write("work/att-run/out"),
		write("logs/task-run/att-older.log"), // an older agent's layout
	}
	gone := []string{
		write("logs/att-done.log"), write("logs/att-done.log.1"), write("work/att-done/out"),
		write("logs/task-done/att-older.log"),
	}
	fresh := write("logs/att-new.log")
	if err := os.Chtimes(fresh, time.Now(), time.Now()); err != nil {
		t.Fatal(err)
	}
	kept = append(kept, fresh)

	if n := a.pruneAttemptFiles(time.Now().Add(-time.Hour)); n != len(gone) {
		t.Errorf("removed %d entries, want %d", n, len(gone))
	}
	for _, p := range kept {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s should be kept: %v", p, err)
		}
	}
	for _, p := range gone {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s should be removed (%v)", p, err)
		}
	}
}

// A log opens where its directory is missing (made on demand), and the
// run's output lands in one file per attempt.
func TestOpenRotatingMakesItsDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "logs", "att-1.log")
	f, err := openRotating(path, 1<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "hello\n" {
		t.Fatalf("log holds %q (%v)", b, err)
	}
}

// An attempt's log is made on its first output: a silent attempt that
// succeeds leaves no file; one that prints gets herd's header, its output
// and herd's closing line; a silent one that fails still gets a file
// saying how it ended, as does one that could not start.
func TestAttemptLogIsMadeOnFirstOutput(t *testing.T) {
	a := agentForTest(t, "none", func() (limiter, error) { return noLimits{}, nil })
	run := func(id string, command ...string) outcome {
		t.Helper()
		return a.runProcess(context.Background(), api.Assignment{
			Attempt: api.Attempt{ID: id, TaskID: "task-" + id, Number: 1},
			Spec:    api.TaskSpec{Command: command},
		})
	}
	logOf := func(id string) (string, bool) {
		b, err := os.ReadFile(filepath.Join(a.cfg.DataDir, "logs", id+".log"))
		if os.IsNotExist(err) {
			return "", false
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(b), true
	}
	if out := run("silent", "true"); out.state != "SUCCEEDED" {
		t.Fatalf("silent: %+v", out)
	}
	if text, ok := logOf("silent"); ok {
		t.Errorf("a silent successful attempt left a log: %q", text)
	}
	if out := run("loud", "sh", "-c", "echo out; echo err >&2"); out.state != "SUCCEEDED" || out.tail != "out\nerr\n" {
		t.Fatalf("loud: %+v", out)
	}
	text, ok := logOf("loud")
	if !ok || !strings.HasPrefix(text, "--- herd: task task-loud attempt 1 (loud) on test") ||
		!strings.Contains(text, "\nout\nerr\n--- herd: SUCCEEDED, exit code 0") {
		t.Errorf("loud attempt's log: %q (exists %v)", text, ok)
	}
	if out := run("failed", "sh", "-c", "exit 3"); out.state != "FAILED" || out.exitCode != 3 {
		t.Fatalf("failed: %+v", out)
	}
	if text, ok := logOf("failed"); !ok || !strings.HasPrefix(text, "--- herd: task task-failed") || !strings.Contains(text, "--- herd: FAILED, exit code 3") {
		t.Errorf("failed attempt's log: %q (exists %v)", text, ok)
	}
	if out := run("missing", "/nonexistent/herd-test-command"); out.state != "FAILED" {
		t.Fatalf("missing: %+v", out)
	}
	if text, ok := logOf("missing"); !ok || !strings.Contains(text, "--- herd: start \"/nonexistent/herd-test-command\"") {
		t.Errorf("unstartable attempt's log: %q (exists %v)", text, ok)
	}
}

// A log that cannot be made does not stall the attempt: its output still
// drains (into the tail) and the attempt ends as its process did.
func TestAttemptRunsWhenItsLogCannotBeMade(t *testing.T) {
	a := agentForTest(t, "none", func() (limiter, error) { return noLimits{}, nil })
	// A file where the logs directory should be.
	logs := filepath.Join(a.cfg.DataDir, "logs")
	if err := os.RemoveAll(logs); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logs, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	// More than a pipe holds, so a stalled copy would hold the run
	// until its timeout.
	timeout := int64(20)
	out := a.runProcess(context.Background(), api.Assignment{
		Attempt: api.Attempt{ID: "a1", TaskID: "t1", Number: 1},
		Spec:    api.TaskSpec{Command: []string{"sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x; echo; echo done"}, TimeoutSeconds: &timeout},
	})
	if out.state != "SUCCEEDED" || !strings.HasSuffix(out.tail, "x\ndone\n") {
		t.Fatalf("attempt with no log: state %s, tail ends %q", out.state, out.tail[max(0, len(out.tail)-20):])
	}
}

// A wall clock set two hours forward after an attempt's log was written
// (a board without a real-time clock, corrected by NTP) does not make the
// log old: it is removed once the retention has passed in monotonic time.
func TestLogRetentionDoesNotFollowClockSteps(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	var step, mono time.Duration
	a := &Agent{cfg: Config{DataDir: dir, LogRetention: time.Hour}, workDirs: newWorkDirs(filepath.Join(dir, "work")),
		clock: steady.New(func() time.Time { return start.Add(mono + step) }, func() time.Duration { return mono })}
	_ = a.clock.Now() // the agent's first reading, at start
	log := filepath.Join(dir, "logs", "att-1.log")
	if err := os.MkdirAll(filepath.Dir(log), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(log, []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	step, mono = 2*time.Hour, time.Minute
	if n := a.pruneAttemptFiles(a.pruneCutoff()); n != 0 {
		t.Fatalf("a step of the wall clock removed %d entries", n)
	}
	mono = 70 * time.Minute
	if n := a.pruneAttemptFiles(a.pruneCutoff()); n != 1 {
		t.Fatalf("after the retention, %d entries removed, want the log", n)
	}
}
