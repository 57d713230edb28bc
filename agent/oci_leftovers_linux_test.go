package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A container an earlier run of the agent left running, with its bundle,
// is killed and removed when the runtime is set up again, and its attempt
// named; the state directory is left empty.
func TestLeftoverContainersAreRemoved(t *testing.T) {
	dataDir := t.TempDir()
	rt, why := findRuntime("runc", dataDir)
	if rt == nil {
		t.Skip(why)
	}
	bundles := filepath.Join(dataDir, "oci", "bundles")
	bundle := filepath.Join(bundles, "a-left")
	root := filepath.Join(bundle, "rootfs")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	var mounts []ociMount
	for _, d := range []string{"/bin", "/lib", "/lib64", "/usr", "/sbin"} {
		fi, err := os.Lstat(d)
		if err != nil {
			continue
		}
		src := d
		if fi.Mode()&os.ModeSymlink != 0 {
			if src, err = filepath.EvalSymlinks(d); err != nil {
				continue
			}
		}
		_ = os.MkdirAll(filepath.Join(root, d), 0o755)
		mounts = append(mounts, ociMount{Destination: d, Type: "bind", Source: src, Options: []string{"rbind", "ro"}})
	}
	id := "herd-a-left"
	spec := rt.spec(containerSpec{id: id, root: root, args: []string{"sleep", "300"}, env: []string{"PATH=/usr/bin:/bin"}, cwd: "/", memoryMB: 64, cpuMillis: 500, extra: mounts})
	if err := writeSpec(bundle, spec); err != nil {
		t.Fatal(err)
	}
	// A file, not a pipe, for its output: the detached container keeps
	// the descriptors open, and a pipe would not end while it runs.
	logPath := filepath.Join(t.TempDir(), "run.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	run := exec.Command(rt.path, "--root", rt.root, "run", "--detach", "--bundle", bundle, id)
	run.Stdout, run.Stderr = logFile, logFile
	if err := run.Run(); err != nil {
		out, _ := os.ReadFile(logPath)
		t.Fatalf("start the leftover container: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(rt.path, "--root", rt.root, "delete", "-f", id).Run() })
	if out, err := exec.Command(rt.path, "--root", rt.root, "state", id).Output(); err != nil {
		t.Fatalf("the leftover container is not there: %v", err)
	} else if !strings.Contains(string(out), `"running"`) {
		t.Fatalf("the leftover container does not run: %s", out)
	}

	found := rt.removeLeftovers(bundles)
	if len(found) != 1 || !found["a-left"] {
		t.Fatalf("found %v, want the attempt a-left", found)
	}
	if _, err := exec.Command(rt.path, "--root", rt.root, "state", id).Output(); err == nil {
		t.Fatal("the leftover container is still known to the runtime")
	}
	if _, err := os.Stat(bundle); !os.IsNotExist(err) {
		t.Fatalf("the leftover bundle is still there: %v", err)
	}
}
