//go:build unix

package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"
)

// A process profiled through HERD_CPU_PROFILE stops its profile and
// writes it out when it is sent SIGUSR1, before it exits (herd bench ends
// the deployment's profiles with its measured window so); stopping it
// again at exit does nothing more.
func TestCPUProfileStopsOnSIGUSR1(t *testing.T) {
	if err := pprof.StartCPUProfile(io.Discard); err != nil {
		t.Skipf("a CPU profile of the test runs already (go test -cpuprofile): %v", err)
	}
	pprof.StopCPUProfile()
	path := filepath.Join(t.TempDir(), "run.pprof")
	t.Setenv("HERD_CPU_PROFILE", path)
	stop := startCPUProfile()
	defer stop()
	if err := pprof.StartCPUProfile(io.Discard); err == nil {
		pprof.StopCPUProfile()
		t.Fatal("no profile was running after startCPUProfile")
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	// The signal is handled on its own goroutine: once the profile has
	// stopped, another may start.
	stopped := false
	for deadline := time.Now().Add(10 * time.Second); !stopped && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if pprof.StartCPUProfile(io.Discard) == nil {
			pprof.StopCPUProfile()
			stopped = true
		}
	}
	if !stopped {
		t.Fatal("the profile still ran 10 s after SIGUSR1")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Fatalf("the profile file holds %d bytes, not a gzipped profile", len(b))
	}
	stop()
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, b) {
		t.Fatalf("stopping again changed the written profile (%v)", err)
	}
}
