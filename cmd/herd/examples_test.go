package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"herd/agent"
	"herd/api"
	"herd/test"
)

// Every file under examples/ runs as its comment and examples/README.md
// say, against a cluster with a plain agent and one with a GPU.
func TestExamplesRun(t *testing.T) {
	c := test.NewClusterWith(t, 3, test.Setup{})
	test.WaitRegistered(t, c.StartAgent(agent.Config{ID: "edge-1", Slots: 2}))
	test.WaitRegistered(t, c.StartAgent(agent.Config{ID: "gpu-box", Slots: 2, Labels: map[string]string{"accelerator": "gpu"},
		Resources: api.Resources{CPUMillis: 2000, MemoryMB: 2048, GPU: 1}}))
	herd := cliAt(c.Replicas[0].Cfg.HTTPAddr)
	cl := c.AllClient()

	// The pipeline: 1..100 generated, squared in two halves, summed.
	out, errOut, code := herd("job", "run", "../../examples/pipeline.hcl", "-wait", "-o", "json")
	var job api.Job
	if err := json.Unmarshal([]byte(out), &job); code != 0 || err != nil || job.State != api.JobSucceeded {
		t.Fatalf("pipeline: exit %d, %v\n%s\n%s", code, err, out, errOut)
	}
	sum := job.Stages[len(job.Stages)-1]
	if sum.Name != "sum" || len(sum.Tasks) != 1 {
		t.Fatalf("pipeline's last stage: %+v", sum)
	}
	if logs, errOut, code := herd("task", "logs", sum.Tasks[0].ID); code != 0 || !strings.Contains(logs, "338350") {
		t.Fatalf("the sum of the squares of 1..100 is 338350: exit %d\n%s\n%s", code, logs, errOut)
	}

	// The GPU task runs on the node with a GPU and the label.
	if out, errOut, code := herd("task", "submit", "-f", "../../examples/gpu-task.jsonl", "-wait"); code != 0 {
		t.Fatalf("gpu task: exit %d\n%s\n%s", code, out, errOut)
	}
	tasks, _, err := cl.ListTasks(test.Ctx(t, 10*time.Second), api.TaskQuery{Limit: 100}, api.ReadOptions{Consistent: true})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	for _, task := range tasks.Tasks {
		if task.Name != "infer" {
			continue
		}
		full, _, err := cl.GetTask(test.Ctx(t, 10*time.Second), task.ID, api.ReadOptions{Consistent: true})
		if err != nil || full.State != api.TaskSucceeded || len(full.Attempts) == 0 || full.Attempts[0].NodeID != "gpu-box" {
			t.Fatalf("the gpu task must succeed on gpu-box: %+v, %v", full, err)
		}
		ran = true
	}
	if !ran {
		t.Fatal("no task named infer")
	}

	// The periodic job starts runs that succeed, until it is cancelled.
	out, errOut, code = herd("job", "run", "../../examples/cron.hcl", "-o", "json")
	var sub api.JobSubmitResponse
	if err := json.Unmarshal([]byte(out), &sub); code != 0 || err != nil || sub.State != api.JobScheduled {
		t.Fatalf("cron job: exit %d, %v\n%s\n%s", code, err, out, errOut)
	}
	if !test.Eventually(30*time.Second, func() bool {
		j, _, err := cl.GetJob(test.Ctx(t, 5*time.Second), sub.ID, api.ReadOptions{Consistent: true})
		if err != nil || j.LastRun == "" {
			return false
		}
		r, _, err := cl.GetJob(test.Ctx(t, 5*time.Second), j.LastRun, api.ReadOptions{Consistent: true})
		return err == nil && r.State == api.JobSucceeded
	}) {
		t.Fatal("no run of the periodic job succeeded")
	}
	if _, errOut, code := herd("job", "cancel", sub.ID); code != 0 {
		t.Fatalf("cancel the periodic job: exit %d, %s", code, errOut)
	}
}
