package cluster

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"herd/config"
)

// A replica that started, led and shut down leaves no goroutine behind:
// operators restart replicas in place, and tests start hundreds.
func TestShutdownLeaksNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t)
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	raftLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.DefaultServer()
	cfg.ID = "s1"
	cfg.DataDir = filepath.Join(t.TempDir(), "s1")
	cfg.HTTPAddr, cfg.RaftAddr = httpLn.Addr().String(), raftLn.Addr().String()
	gossipLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.GossipAddr = gossipLn.Addr().String()
	gossipLn.Close()
	cfg.Bootstrap = true
	cfg.LogLevel = "off"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := Start(cfg, Options{HTTPListener: httpLn, RaftListener: raftLn})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !s.IsLeader() {
		if time.Now().After(deadline) {
			s.Shutdown()
			t.Fatal("single replica did not become leader")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
}
