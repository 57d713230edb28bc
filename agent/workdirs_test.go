package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"herd/api"
)

func TestWorkDirsReuseOnlyEmptyContainedDirectories(t *testing.T) {
	root := filepath.Join(t.TempDir(), "work")
	w := newWorkDirs(root)
	first, err := w.take("a1")
	if err != nil || first != filepath.Join(root, "a1") || !emptyDir(first) {
		t.Fatalf("first directory %q (%v) should be a new, empty work/a1", first, err)
	}
	w.give(first, "a1", true)
	if again, _ := w.take("a2"); again != first {
		t.Fatalf("an empty directory whose processes are gone should be lent again: got %q", again)
	}
	if !w.inPool("a1") {
		t.Fatal("a lent directory must be kept from the janitor")
	}
	// a2 leaves a file: its directory is kept under its own id.
	if err := os.WriteFile(filepath.Join(first, "out"), []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	w.give(first, "a2", true)
	if _, err := os.Stat(filepath.Join(root, "a2", "out")); err != nil {
		t.Fatalf("the files a2 left should be kept as work/a2: %v", err)
	}
	if w.inPool("a1") || w.inPool("a2") {
		t.Fatal("a directory with files is not the pool's any more")
	}
	// An attempt whose processes may remain does not hand its directory on.
	third, _ := w.take("a3")
	if third != filepath.Join(root, "a3") {
		t.Fatalf("with nothing idle a new directory is made: %q", third)
	}
	w.give(third, "a3", false)
	if next, _ := w.take("a4"); next == third {
		t.Fatal("a directory a stray process may still write into was lent again")
	}
	// A directory written into while idle is not lent.
	idle, _ := w.take("a5")
	w.give(idle, "a5", true)
	if err := os.WriteFile(filepath.Join(idle, "late"), []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	if next, _ := w.take("a6"); next == idle || !emptyDir(next) {
		t.Fatalf("a directory written into while idle was lent: %q", next)
	}
	// The same when its modification time was settled when it was given
	// back (then one stat tells), and an untouched one is lent again.
	settled := func(dir string) {
		t.Helper()
		old := time.Now().Add(-time.Hour)
		if err := os.Chtimes(dir, old, old); err != nil {
			t.Fatal(err)
		}
	}
	quiet, _ := w.take("a7")
	settled(quiet)
	w.give(quiet, "a7", true)
	if next, _ := w.take("a8"); next != quiet {
		t.Fatalf("an untouched idle directory should be lent again: got %q, want %q", next, quiet)
	}
	settled(quiet)
	w.give(quiet, "a8", true)
	if err := os.WriteFile(filepath.Join(quiet, "late"), []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	fresh, _ := w.take("a9")
	if fresh == quiet || !emptyDir(fresh) {
		t.Fatalf("a directory written into while idle was lent: %q", fresh)
	}
	// Written into and emptied again while idle: its time changed, so it
	// is read, found empty and lent.
	settled(fresh)
	w.give(fresh, "a9", true)
	tmp := filepath.Join(fresh, "tmp")
	if err := os.WriteFile(tmp, []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(tmp); err != nil {
		t.Fatal(err)
	}
	if next, _ := w.take("a10"); next != fresh {
		t.Fatalf("an idle directory emptied again should be lent: got %q, want %q", next, fresh)
	}
}

// Through runProcess: under a limit method that accounts for every process
// (cgroups) a silent attempt's directory serves the next one; under one
// that cannot (none) each attempt gets its own, as before.
func TestRunProcessReusesWorkDirsOnlyWhenContained(t *testing.T) {
	for _, m := range limitMethodsForTest {
		t.Run(m.name, func(t *testing.T) {
			a := agentForTest(t, m.name, m.make)
			cfg := a.cfg
			reuse := m.name == "cgroup-v1" // rlimit and none cannot see every process
			run := func(id, script string) {
				t.Helper()
				out := a.runProcess(context.Background(), api.Assignment{
					Attempt: api.Attempt{ID: id, TaskID: "task", Number: 1},
					Spec:    api.TaskSpec{Command: []string{"sh", "-c", script}},
				})
				if out.state != "SUCCEEDED" {
					t.Fatalf("%s: %+v", id, out)
				}
			}
			run("a1", "test -z \"$(ls -A)\"") // starts in an empty directory
			run("a2", "test -z \"$(ls -A)\" && echo kept > f")
			run("a3", "test -z \"$(ls -A)\"")
			entries, err := os.ReadDir(filepath.Join(cfg.DataDir, "work"))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if b, err := os.ReadFile(filepath.Join(cfg.DataDir, "work", "a2", "f")); err != nil || string(b) != "kept\n" {
				t.Fatalf("a2's file should be kept in work/a2 (%v): %v", err, names)
			}
			want := 3 // a1, a2, a3 each made their own
			if reuse {
				want = 2 // a1's directory went to a2 (kept as work/a2); a3 got a new one
			}
			if len(names) != want {
				t.Fatalf("work holds %v, want %d entries", names, want)
			}
		})
	}
}
