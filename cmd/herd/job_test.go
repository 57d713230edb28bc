package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"herd/agent"
	"herd/api"
	"herd/test"
)

const pipelineHCL = `
name            = "images"
idempotency_key = "images-cli"

stage "acquire" {
  outputs = ["raw.bin"]
  task {
    command = ["sh", "-c", "echo frame > raw.bin"]
    timeout = "30s"
  }
}

stage "count" {
  depends_on = ["acquire"]
  inputs     = ["acquire.raw.bin"]
  count      = 2
  task {
    command      = ["sh", "-c", "wc -c < $HERD_INPUTS/acquire/raw.bin"]
    max_attempts = 2
    size         = "small"
  }
}
`

func TestParseJobFile(t *testing.T) {
	spec, err := parseJobFile("p.hcl", []byte(pipelineHCL))
	if err != nil {
		t.Fatal(err)
	}
	if spec.Name != "images" || len(spec.Stages) != 2 || spec.Stages[1].Count != 2 || spec.Stages[1].Inputs[0] != "acquire.raw.bin" ||
		*spec.Stages[0].Task.TimeoutSeconds != 30 || *spec.Stages[1].Task.MaxAttempts != 2 || spec.Stages[1].Task.Size != "small" {
		t.Fatalf("parsed %+v", spec)
	}
	for name, src := range map[string]string{
		"unknown attribute": `stage "a" { task { command = ["true"] } colour = "red" }`,
		"no task":           `stage "a" { }`,
		"bad timeout": `stage "a" { task { command = ["true"]
  timeout = "1.5s" } }`,
		"bad json": `{"name": "x", "stagez": []}`,
	} {
		if _, err := parseJobFile("bad.hcl", []byte(src)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func TestCLIJobs(t *testing.T) {
	c := test.NewCluster(t, 3)
	herd := cliAt(c.Replicas[c.Follower()].Cfg.HTTPAddr)
	file := filepath.Join(t.TempDir(), "pipeline.hcl")
	if err := os.WriteFile(file, []byte(pipelineHCL), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := herd("job", "run", file)
	if code != 0 || !strings.HasPrefix(out, "Job ") {
		t.Fatalf("job run exit %d: %s %s", code, out, errOut)
	}
	id := strings.Fields(out)[1]
	// No node: the first stage waits, the second has not started.
	if out, _, code = herd("job", "status", id); code != 0 || !strings.Contains(out, "[acquire] RUNNING") || !strings.Contains(out, "acquire ──▶ [count] WAITING") {
		t.Fatalf("job status exit %d:\n%s", code, out)
	}
	if out, _, code = herd("job", "list"); code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "acquire RUNNING, count WAITING") {
		t.Fatalf("job list exit %d:\n%s", code, out)
	}
	if out, _, code = herd("job", "cancel", "-reason", "enough", id); code != 0 || !strings.Contains(out, "CANCELLED") {
		t.Fatalf("job cancel exit %d:\n%s", code, out)
	}
	if !test.Eventually(10*time.Second, func() bool {
		out, _, code = herd("job", "status", id)
		return code == 0 && strings.Contains(out, "[count] CANCELLED")
	}) {
		t.Fatalf("after cancel:\n%s", out)
	}
	bad := filepath.Join(t.TempDir(), "cycle.hcl")
	_ = os.WriteFile(bad, []byte(`stage "a" {
  depends_on = ["b"]
  task { command = ["true"] }
}
stage "b" {
  depends_on = ["a"]
  task { command = ["true"] }
}
`), 0o600)
	if _, errOut, code = herd("job", "run", bad); code != 1 || !strings.Contains(errOut, "dependency cycle") {
		t.Fatalf("a cycle: exit %d, %s", code, errOut)
	}
	if _, errOut, code = herd("job", "status", "nope"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Fatalf("status of an unknown job: exit %d, %s", code, errOut)
	}
}

// task submit -wait follows the task and exits with its exit code: 0, and
// 3 for a command that exits 3 on its every attempt.
func TestCLISubmitWait(t *testing.T) {
	c := test.NewClusterWith(t, 3, test.Setup{})
	h := c.StartAgent(agent.Config{ID: "edge-1", Slots: 2})
	test.WaitRegistered(t, h)
	herd := cliAt(c.Replicas[0].Cfg.HTTPAddr)
	// -wait behaves as ssh would: herd's words on standard error, the
	// task's output on standard output, its exit code as herd's.
	out, errOut, code := herd("task", "submit", "-wait", "--", "sh", "-c", "echo hello-log")
	if code != 0 || out != "hello-log\n" || !strings.Contains(errOut, "SUCCEEDED on edge-1 in ") || !strings.Contains(errOut, "(attempt 1 of at most 3), exit code 0") {
		t.Fatalf("submit -wait: exit %d\nstdout %q\nstderr %s", code, out, errOut)
	}
	id := strings.TrimSuffix(strings.Fields(errOut)[2], ",")
	if logs, errLogs, code := herd("task", "logs", id, "-f"); code != 0 || !strings.Contains(logs, "hello-log") {
		t.Fatalf("task logs: exit %d\n%s\n%s", code, logs, errLogs)
	}
	out, errOut, code = herd("task", "run", "-max-attempts", "1", "sh", "-c", "for i in 1 2 3; do echo line-$i; done; exit 7")
	if code != 7 || out != "line-1\nline-2\nline-3\n" || !strings.Contains(errOut, "FAILED on edge-1") || !strings.Contains(errOut, "exit code 7") {
		t.Fatalf("task run: exit %d\nstdout %q\nstderr %s", code, out, errOut)
	}
	// With -o json, standard output is the finished task's record.
	out, errOut, code = herd("task", "run", "-o", "json", "-max-attempts", "1", "sh", "-c", "echo to-stderr; exit 4")
	var finished api.Task
	if err := json.Unmarshal([]byte(out), &finished); code != 4 || err != nil || finished.State != api.TaskFailed || !strings.Contains(errOut, "to-stderr") {
		t.Fatalf("task run -o json: exit %d, %v\nstdout %q\nstderr %s", code, err, out, errOut)
	}
	if _, errOut, code = herd("task", "submit", "-logs", "--", "true"); code != 2 || !strings.Contains(errOut, "-logs goes with -wait") {
		t.Fatalf("-logs without -wait: exit %d, %s", code, errOut)
	}
	out, errOut, code = herd("task", "submit", "-wait", "-max-attempts", "2", "--", "sh", "-c", "echo bad; exit 3")
	if code != 3 || !strings.Contains(errOut, "ended FAILED") || !strings.Contains(errOut, "FAILED: failed: gave up after 2 attempts") ||
		!strings.Contains(errOut, "(attempt 2 of at most 2), exit code 3") || out != "bad\n" {
		t.Fatalf("submit -wait of exit 3: exit %d\nstdout %q\nstderr %s", code, out, errOut)
	}
	// The monitor prints that task's events, in order, ending with its end
	// (once the replica asked has applied it).
	failedID := strings.TrimSuffix(strings.Fields(strings.Split(errOut, "task ")[1])[0], ",")
	var lines []string
	test.Eventually(30*time.Second, func() bool {
		out, errOut, code = herd("monitor", "-no-follow", "-topic", "task:"+failedID)
		lines = strings.Split(strings.TrimSpace(out), "\n")
		return code != 0 || strings.Contains(out, "gave up")
	})
	if code != 0 || len(lines) < 6 || !strings.Contains(lines[0], "task "+failedID+" queued [PENDING]") ||
		!strings.Contains(lines[len(lines)-1], "failed [FAILED]: gave up after 2 attempts") {
		t.Fatalf("monitor of task %s: exit %d\n%s\n%s", failedID, code, out, errOut)
	}
	if _, errOut, code = herd("monitor", "-topic", "attempt"); code != 2 || !strings.Contains(errOut, "unknown event topic") {
		t.Fatalf("monitor of a bad topic: exit %d, %s", code, errOut)
	}

	// submit -f -wait follows every task: exit 1 when one fails.
	specs := filepath.Join(t.TempDir(), "specs.jsonl")
	var lines5 []string
	for i := range 5 {
		cmd := `["true"]`
		if i == 3 {
			cmd = `["sh","-c","exit 4"]`
		}
		lines5 = append(lines5, fmt.Sprintf(`{"name":"b%d","command":%s,"max_attempts":1}`, i, cmd))
	}
	_ = os.WriteFile(specs, []byte(strings.Join(lines5, "\n")), 0o600)
	out, errOut, code = herd("task", "submit", "-f", specs, "-wait")
	if code != 1 || !strings.Contains(out, "5 tasks finished: 4 succeeded, 1 did not") || !strings.Contains(errOut, "1 of 5 tasks did not succeed") ||
		!strings.Contains(errOut, "finished 5/5 (1 failed)") {
		t.Fatalf("submit -f -wait: exit %d\n%s\n%s", code, out, errOut)
	}
}
