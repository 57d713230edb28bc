package agent_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"herd/agent"
	"herd/api"
	"herd/config"
	"herd/test/localcluster"
)

// An agent that registered, ran a task and was stopped leaves no goroutine
// behind; neither does the replica it talked to.
func TestAgentStopLeaksNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfgs, err := localcluster.Configs(t.TempDir(), "s", 1, false)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cfgs[0]
	cfg.LogLevel = "off"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	c, err := localcluster.Start([]config.Server{cfg}, localcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()

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
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
}
