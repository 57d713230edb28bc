package test

import (
	"testing"
	"time"

	"herd/api"
)

func spec(key string) api.TaskSpec {
	return api.TaskSpec{Name: "echo", IdempotencyKey: key, Command: []string{"sh", "-c", "echo hi"}}
}

// Test 1: submit through a follower; the task is readable on all three.
func TestSubmitThroughFollowerReadableEverywhere(t *testing.T) {
	c := NewCluster(t, 3)
	f := c.Follower()
	ctx := Ctx(t, 30*time.Second)
	res, created, err := c.Client(f).SubmitTask(ctx, spec("k-1"))
	if err != nil {
		t.Fatalf("submit via follower %s: %v", c.Replicas[f].Cfg.ID, err)
	}
	if !created || res.State != "PENDING" || res.Index == 0 {
		t.Fatalf("unexpected submit answer %+v created=%v", res, created)
	}
	c.WaitApplied(res.Index)
	for i := range c.Replicas {
		task, meta, err := c.Client(i).GetTask(ctx, res.ID, api.ReadOptions{})
		if err != nil {
			t.Fatalf("read on %s: %v", c.Replicas[i].Cfg.ID, err)
		}
		if task.ID != res.ID || task.Spec.Command[2] != "echo hi" || meta.Index < res.Index || !meta.KnownLeader {
			t.Fatalf("replica %s answered %+v meta %+v", c.Replicas[i].Cfg.ID, task, meta)
		}
	}
}
