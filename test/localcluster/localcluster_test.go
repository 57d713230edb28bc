package localcluster_test

import (
	"context"
	"net"
	"testing"
	"time"

	"herd/api"
	"herd/test/localcluster"
)

// FreeAddr never hands out one port twice, and what it hands out is free
// for TCP and UDP.
func TestFreeAddrIsFreshAndFree(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		addr, err := localcluster.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
	}
	addr, _ := localcluster.FreeAddr()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("TCP on %s: %v", addr, err)
	}
	defer ln.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("UDP on %s: %v", addr, err)
	}
	pc.Close()
}

// Three replicas form a cluster; a replica stopped and started again comes
// back from its data directory with what was committed.
func TestClusterFormsAndRestartsAReplica(t *testing.T) {
	cfgs, err := localcluster.Configs(t.TempDir(), "r", 3, false)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfgs {
		cfgs[i].LogLevel = "off"
	}
	c, err := localcluster.Start(cfgs, localcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	cl, err := api.NewClient(c.HTTPAddrs()...)
	if err != nil {
		t.Fatal(err)
	}
	cl.Retries, cl.RetryWait = 40, 250*time.Millisecond
	sub, _, err := cl.SubmitTask(ctx, api.TaskSpec{IdempotencyKey: "k", Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StopReplica(1); err != nil {
		t.Fatal(err)
	}
	if c.Server(1) != nil || len(c.Servers()) != 2 {
		t.Fatalf("replica 1 still listed as running")
	}
	if err := c.StartReplica(1); err != nil {
		t.Fatal(err)
	}
	if err := c.StartReplica(1); err == nil {
		t.Fatal("a running replica started twice")
	}
	one, err := api.NewClient(c.Config(1).HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	for {
		task, _, err := one.GetTask(ctx, sub.ID, api.ReadOptions{})
		if err == nil && task.ID == sub.ID {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("restarted replica does not have the task: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
