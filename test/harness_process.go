package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// buildHerd compiles the herd binary into the test's temporary directory
// (go's build cache makes each one after the first a link), or skips the
// test under -short.
func buildHerd(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the herd binary; skipped with -short")
	}
	// The test binary does not import the command, so go test's cache
	// would keep a result after a change to it alone; reading its files
	// here makes them part of what the cached result depends on.
	sources, _ := filepath.Glob(filepath.Join("..", "cmd", "herd", "*.go"))
	for _, f := range sources {
		if _, err := os.ReadFile(f); err != nil {
			t.Fatalf("read the command's source: %v", err)
		}
	}
	bin := filepath.Join(t.TempDir(), "herd")
	cmd := exec.Command("go", "build", "-o", bin, "herd/cmd/herd")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
