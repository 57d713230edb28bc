package test

import (
	"context"
	"errors"
	"math"
	"net"
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"herd/agent"
)

// The linearizability model must accept what the system may do and catch
// what it must not: each case is a small history with a known verdict.
func TestTaskModelVerdicts(t *testing.T) {
	op := func(client int, kind string, out taskOutput, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: taskInput{Kind: kind, Key: "k"}, Output: out, Call: call, Return: ret}
	}
	ok := taskOutput{}
	unknown := taskOutput{Unknown: true}
	found := func(state string, index uint64) taskOutput {
		return taskOutput{Found: true, State: state, Index: index}
	}
	cases := []struct {
		name string
		h    []porcupine.Operation
		want bool
	}{
		{"submit then read progress", []porcupine.Operation{
			op(0, "submit", ok, 0, 1), op(1, "get", found("PENDING", 5), 2, 3), op(1, "get", found("SUCCEEDED", 9), 4, 5),
		}, true},
		{"acknowledged submit then not found", []porcupine.Operation{
			op(0, "submit", ok, 0, 1), op(1, "get", taskOutput{}, 2, 3),
		}, false},
		{"read goes back in time", []porcupine.Operation{
			op(0, "submit", ok, 0, 1), op(1, "get", found("RUNNING", 9), 2, 3), op(2, "get", found("PENDING", 5), 4, 5),
		}, false},
		{"concurrent reads in either order", []porcupine.Operation{
			op(0, "submit", ok, 0, 1), op(1, "get", found("RUNNING", 9), 2, 6), op(2, "get", found("PENDING", 5), 3, 5),
		}, true},
		{"terminal state changes", []porcupine.Operation{
			op(0, "submit", ok, 0, 1), op(1, "get", found("SUCCEEDED", 9), 2, 3), op(1, "get", found("FAILED", 12), 4, 5),
		}, false},
		{"acknowledged cancel then success", []porcupine.Operation{
			op(0, "submit", ok, 0, 1), op(1, "cancel", found("CANCELLED", 7), 2, 3), op(2, "get", found("SUCCEEDED", 9), 4, 5),
		}, false},
		{"refused cancel then cancelled", []porcupine.Operation{
			op(0, "submit", ok, 0, 1), op(1, "cancel", taskOutput{Found: true, Rejected: true}, 2, 3), op(2, "get", found("CANCELLED", 9), 4, 5),
		}, false},
		{"unknown submit may take effect late", []porcupine.Operation{
			op(0, "submit", unknown, 0, math.MaxInt64), op(1, "get", taskOutput{}, 2, 3), op(1, "get", found("PENDING", 4), 5, 6),
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(TaskModel, c.h); got != c.want {
				t.Fatalf("linearizable = %v, want %v", got, c.want)
			}
		})
	}
}

// The fault network cuts, stalls and heals real loopback connections.
func TestNetworkFaults(t *testing.T) {
	n := NewNetwork(1)
	ln, err := n.Listen("b", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { // echo
				buf := make([]byte, 64)
				for {
					k, err := c.Read(buf)
					if err != nil {
						c.Close()
						return
					}
					if _, err := c.Write(buf[:k]); err != nil {
						return
					}
				}
			}()
		}
	}()
	dial := n.Dialer("a")
	ctx := context.Background()
	c, err := dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	echo := func(c net.Conn) error {
		_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		buf := make([]byte, 4)
		_, err := c.Read(buf)
		return err
	}
	if err := echo(c); err != nil {
		t.Fatalf("healthy link: %v", err)
	}

	// One way b → a: a's request gets through, the echo does not.
	n.Block("b", "a", true)
	if err := echo(c); err == nil {
		t.Fatal("echo came back over a cut link")
	}
	if _, err := dial(ctx, "tcp", ln.Addr().String()); err != nil {
		t.Fatalf("a → b is open, yet dial failed: %v", err)
	}
	n.Block("a", "b", true)
	if _, err := dial(ctx, "tcp", ln.Addr().String()); !errors.Is(err, ErrDialRefused) {
		t.Fatalf("dial over a cut link: %v, want ErrDialRefused", err)
	}

	// Pause: writes stall until the deadline.
	n.Heal()
	c2, err := dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	n.Pause("b", true)
	if err := echo(c2); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("echo from a paused peer: %v, want a deadline error", err)
	}
	n.Pause("b", false)
	if err := echo(c2); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after resume: %v", err)
	}
	c3, err := dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if err := echo(c3); err != nil {
		t.Fatalf("healed link: %v", err)
	}
}

// The no-overlap checker flags two runs of one task that overlap, even
// when a short run lies between them, and passes runs one after another.
func TestNoOverlapChecker(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name string
		runs []agent.RunRecord
		want int
	}{
		{"one after another", []agent.RunRecord{
			{Node: "a1", Task: "t", Attempt: "x", Started: at(0), Ended: at(100)},
			{Node: "a2", Task: "t", Attempt: "y", Started: at(150), Ended: at(300)},
		}, 0},
		{"overlapping", []agent.RunRecord{
			{Node: "a1", Task: "t", Attempt: "x", Started: at(0), Ended: at(200)},
			{Node: "a2", Task: "t", Attempt: "y", Started: at(150), Ended: at(300)},
		}, 1},
		{"overlapping a long run across a short one", []agent.RunRecord{
			{Node: "a1", Task: "t", Attempt: "x", Started: at(0), Ended: at(1000)},
			{Node: "a2", Task: "t", Attempt: "y", Started: at(10), Ended: at(20)},
			{Node: "a3", Task: "t", Attempt: "z", Started: at(500), Ended: at(600)},
		}, 2},
		{"other tasks", []agent.RunRecord{
			{Node: "a1", Task: "t", Attempt: "x", Started: at(0), Ended: at(200)},
			{Node: "a2", Task: "u", Attempt: "y", Started: at(150), Ended: at(300)},
		}, 0},
	} {
		ch := &chaos{anomalies: map[string][]string{}, runs: tc.runs}
		ch.checkNoOverlap()
		if got := len(ch.anomalies[CheckOverlap]); got != tc.want {
			t.Errorf("%s: %d anomalies, want %d: %v", tc.name, got, tc.want, ch.anomalies[CheckOverlap])
		}
	}
}
