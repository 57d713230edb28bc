package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"herd/api"
)

// A task's standard input is empty (the agent's shared /dev/null): one
// that reads it to the end goes on at once, and concurrent attempts
// share it without closing it for each other.
func TestTaskStdinIsEmpty(t *testing.T) {
	a := agentForTest(t, "none", func() (limiter, error) { return noLimits{}, nil })
	timeout := int64(20)
	done := make(chan outcome, 4)
	for i := range cap(done) {
		go func() {
			done <- a.runProcess(context.Background(), api.Assignment{
				Attempt: api.Attempt{ID: "stdin" + string(rune('a'+i)), TaskID: "task", Number: 1},
				Spec:    api.TaskSpec{Command: []string{"sh", "-c", `n=$(cat | wc -c); echo "read $n bytes"`}, TimeoutSeconds: &timeout},
			})
		}()
	}
	for range cap(done) {
		select {
		case out := <-done:
			if out.state != "SUCCEEDED" || !strings.Contains(out.tail, "read 0 bytes") {
				t.Fatalf("reading stdin: %+v", out)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a task reading its stdin never finished")
		}
	}
}
