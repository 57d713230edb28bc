package test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"herd/agent"
	"herd/api"
)

// An attempt's log is read from the node that ran it: followed while the
// attempt runs, to its end; each attempt's log is its own; tail gives the
// end of it; once the node is DOWN the answer says so (and the cluster's
// 64 KiB tail is what remains). The same with TLS and ACLs on, where the
// server reaches the agent's data port over mutual TLS; the node's image
// cache is read the same way.
func TestTaskLogsFromTheNode(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "secure"}[secure], func(t *testing.T) {
			setup := gossipSetup()
			setup.Secure = secure
			taskLogsFromTheNode(t, NewClusterWith(t, 3, setup))
		})
	}
}

func taskLogsFromTheNode(t *testing.T, c *Cluster) {
	a := c.StartAgent(agent.Config{ID: "edge-1", Slots: 2})
	WaitRegistered(t, a)
	cl := c.AllClient()
	var imgErr error
	if !Eventually(30*time.Second, func() bool {
		// Any replica answers, from what it has applied: a follower
		// may not know the node yet.
		_, imgErr = cl.NodeImages(Ctx(t, time.Minute), "edge-1")
		return !errors.Is(imgErr, api.ErrNotFound)
	}) || imgErr != nil {
		t.Fatalf("the node's image cache: %v", imgErr)
	}
	ctx := Ctx(t, time.Minute)
	spec := shSpec("chatty", `for i in 1 2 3 4 5; do echo "attempt $HERD_ATTEMPT_NUMBER line $i"; sleep 0.2; done; test "$HERD_ATTEMPT_NUMBER" = 2`)
	spec.MaxAttempts = ptrTo(2)
	id := submit(t, cl, spec)
	waitTaskState(t, cl, id, api.TaskRunning)
	var followed bytes.Buffer
	if err := cl.TaskLog(ctx, &followed, id, 1, 0, true); err != nil {
		t.Fatal(err)
	}
	if got := followed.String(); !strings.Contains(got, "attempt 1 line 1") || !strings.Contains(got, "attempt 1 line 5") || strings.Contains(got, "attempt 2") {
		t.Fatalf("followed log of attempt 1:\n%s", got)
	}
	waitTaskState(t, cl, id, api.TaskSucceeded)
	var second bytes.Buffer
	if err := cl.TaskLog(ctx, &second, id, 0, 0, false); err != nil {
		t.Fatal(err)
	}
	if got := second.String(); !strings.Contains(got, "attempt 2 line 5") || strings.Contains(got, "attempt 1 line") {
		t.Fatalf("latest attempt's log:\n%s", got)
	}
	var tail bytes.Buffer
	if err := cl.TaskLog(ctx, &tail, id, 2, 16, false); err != nil || tail.Len() != 16 {
		t.Fatalf("tail of 16 bytes: %q (%v)", tail.String(), err)
	}
	if err := cl.TaskLog(ctx, &tail, id, 7, 0, false); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("an attempt that does not exist: %v", err)
	}
	a.Stop()
	if !Eventually(30*time.Second, func() bool {
		n, _, err := cl.GetNode(ctx, "edge-1", api.ReadOptions{})
		return err == nil && n.Liveness == api.LivenessDown
	}) {
		t.Fatal("the node was never declared DOWN")
	}
	err := cl.TaskLog(ctx, &tail, id, 1, 0, false)
	if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "is DOWN") {
		t.Fatalf("the log of a DOWN node: %v", err)
	}
}
