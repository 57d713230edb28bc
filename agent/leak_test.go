package agent_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"herd/agent"
	"herd/api"
	"herd/cluster"
	"herd/config"
)

// An agent that registered, ran a task and was stopped leaves no goroutine
// behind; neither does the replica it talked to.
func TestAgentStopLeaksNoGoroutines(t *testing.T) {
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
	cfg.ID, cfg.DataDir, cfg.Bootstrap, cfg.LogLevel = "s1", filepath.Join(t.TempDir(), "s1"), true, "off"
	cfg.HTTPAddr, cfg.RaftAddr = httpLn.Addr().String(), raftLn.Addr().String()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := cluster.Start(cfg, cluster.Options{HTTPListener: httpLn, RaftListener: raftLn})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()

	ag, err := agent.New(agent.Config{
		ID: "edge-1", Servers: []string{cfg.HTTPAddr}, DataDir: t.TempDir(), Slots: 1,
		HeartbeatInterval: 200 * time.Millisecond, AssignmentWait: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx) }()

	cl, err := api.NewClient(cfg.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	cl.Retries, cl.RetryWait = 40, 250*time.Millisecond
	wait, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, _, err := cl.SubmitTask(wait, api.TaskSpec{IdempotencyKey: "leak", Command: []string{"true"}})
	if err != nil {
		stop()
		t.Fatal(err)
	}
	for {
		task, _, err := cl.GetTask(wait, sub.ID, api.ReadOptions{})
		if err == nil && task.State == "SUCCEEDED" {
			break
		}
		if wait.Err() != nil {
			stop()
			t.Fatalf("task did not succeed: %+v %v", task, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil && err != context.Canceled {
		t.Fatalf("agent stopped with %v", err)
	}
	if err := srv.Shutdown(); err != nil {
		t.Fatal(err)
	}
}
