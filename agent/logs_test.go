package agent

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"herd/api"
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
