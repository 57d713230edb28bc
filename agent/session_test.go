package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"herd/api"

	"github.com/hashicorp/go-hclog"
)

// cannedCluster plays a cluster for one agent (edge-1, session 2): its
// assignments answers are served in order, the last one again and again
// (a little later each time, as a blocking query would), and it accepts
// every report and records it.
type cannedCluster struct {
	answers []api.Assignments
	// startsUnknown: every batch with a start report gets 503
	// outcome_unknown (the leader went away before answering).
	startsUnknown bool

	mu      sync.Mutex
	served  int
	reports []api.AttemptReportItem
}

func (c *cannedCluster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/status/gossip":
		_ = json.NewEncoder(w).Encode(api.GossipInfo{}) // no gossip
	case "/v1/nodes/register":
		_ = json.NewEncoder(w).Encode(api.RegisterResponse{NodeID: "edge-1", SessionGeneration: 2, Index: 10})
	case "/v1/nodes/edge-1/heartbeat":
		_ = json.NewEncoder(w).Encode(api.HeartbeatResponse{Liveness: "READY", SessionGeneration: 2})
	case "/v1/nodes/edge-1/assignments":
		c.mu.Lock()
		i := min(c.served, len(c.answers)-1)
		again := c.served >= len(c.answers)
		c.served++
		c.mu.Unlock()
		if again {
			time.Sleep(20 * time.Millisecond)
		}
		_ = json.NewEncoder(w).Encode(c.answers[i])
	case "/v1/attempts/reports":
		var req api.AttemptReportBatch
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var resp api.AttemptReportBatchResponse
		if c.startsUnknown && slices.ContainsFunc(req.Reports, func(r api.AttemptReportItem) bool { return r.Start != nil }) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(api.ErrorResponse{Error: "leadership lost before the entry was committed", Code: api.CodeOutcomeUnknown})
			return
		}
		c.mu.Lock()
		for _, rep := range req.Reports {
			c.reports = append(c.reports, rep)
			resp.Results = append(resp.Results, api.AttemptReportResult{Report: &api.AttemptReport{Attempt: api.Attempt{ID: rep.AttemptID}}})
		}
		c.mu.Unlock()
		_ = json.NewEncoder(w).Encode(resp)
	default:
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(api.ErrorResponse{Error: "no such route"})
	}
}

// state returns the assignments answers served so far and the reports.
func (c *cannedCluster) state() (int, []api.AttemptReportItem) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.served, slices.Clone(c.reports)
}

// runAgent runs an agent (edge-1, no limits) against c until the test ends.
func runAgent(t *testing.T, c *cannedCluster) *Agent {
	t.Helper()
	return runAgentWith(t, c, nil)
}

// runAgentWith is runAgent with a change to the agent before it runs.
func runAgentWith(t *testing.T, c *cannedCluster, tweak func(*Agent)) *Agent {
	t.Helper()
	hs := httptest.NewServer(c)
	t.Cleanup(hs.Close)
	ag, err := New(Config{
		ID: "edge-1", Servers: []string{hs.URL}, DataDir: t.TempDir(), Slots: 1, Limits: "none",
		HeartbeatInterval: time.Second, AssignmentWait: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if tweak != nil {
		tweak(ag)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ag.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return ag
}

func assignment(state string, spec ...string) api.Assignment {
	x := api.Assignment{Attempt: api.Attempt{ID: "att-1", TaskID: "task-1", Number: 1, NodeID: "edge-1", State: state, LeaseVersion: 7}}
	if state == "RESERVED" {
		x.Spec = api.TaskSpec{Command: spec}
	}
	return x
}

// A restarted agent does not act on assignments older than its session:
// the replica answering first lags, and starting the attempt it shows as
// RESERVED would run again what the agent's previous run started. Once the
// registration has reached the replica, the attempt reads RUNNING and the
// agent reports it LOST.
func TestAgentIgnoresAssignmentsOlderThanItsSession(t *testing.T) {
	c := &cannedCluster{answers: []api.Assignments{
		{NodeID: "edge-1", SessionGeneration: 1, Liveness: "READY", Index: 8, AppliedIndex: 9, Attempts: []api.Assignment{assignment("RESERVED", "true")}},
		{NodeID: "edge-1", SessionGeneration: 2, Liveness: "READY", Index: 10, AppliedIndex: 10, Attempts: []api.Assignment{assignment("RUNNING")}},
	}}
	ag := runAgent(t, c)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, reports := c.state()
		for _, rep := range reports {
			if rep.Start != nil {
				t.Fatalf("the agent started attempt %s from a list older than its session", rep.AttemptID)
			}
		}
		if len(reports) > 0 {
			if rep := reports[0]; rep.AttemptID != "att-1" || rep.Complete == nil || rep.Complete.State != "LOST" {
				t.Fatalf("first report %+v, want att-1 LOST", rep)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent never reported the attempt its previous run started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if started, _, _ := ag.Stats(); started != 0 {
		t.Fatalf("the agent ran %d attempts", started)
	}
}

// An agent that fails over to a replica behind the one it heard from does
// not stop an attempt missing from that replica's older list: the attempt
// was not taken back, the replica has not seen it yet.
func TestAgentKeepsRunningWhatALaggingReplicaDoesNotList(t *testing.T) {
	c := &cannedCluster{answers: []api.Assignments{
		{NodeID: "edge-1", SessionGeneration: 2, Liveness: "READY", Index: 20, AppliedIndex: 20, Attempts: []api.Assignment{assignment("RESERVED", "sleep", "30")}},
		{NodeID: "edge-1", SessionGeneration: 2, Liveness: "READY", Index: 12, AppliedIndex: 15},
	}}
	ag := runAgent(t, c)
	deadline := time.Now().Add(10 * time.Second)
	for {
		// A third answer asked for means the second, stale one was handled.
		served, reports := c.state()
		if served >= 3 && slices.Contains(ag.Running(), "att-1") {
			for _, rep := range reports {
				if rep.Complete != nil {
					t.Fatalf("the agent ended the attempt on a lagging replica's list: %+v", *rep.Complete)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d answers the agent runs %v, want att-1 running", served, ag.Running())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// And it stays running while the lagging replica keeps answering.
	for {
		if served, reports := c.state(); served >= 6 {
			if !slices.Contains(ag.Running(), "att-1") || len(reports) != 1 || reports[0].Start == nil {
				t.Fatalf("after %d answers the agent runs %v and reported %+v, want att-1 running, its start alone reported", served, ag.Running(), reports)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent stopped asking for its assignments")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An agent that cannot learn whether its start report was committed does
// not run the attempt, and reports it LOST: the cluster may have recorded
// it RUNNING, and nothing else would ever end it.
func TestAgentReportsAnUnconfirmedStartLost(t *testing.T) {
	c := &cannedCluster{startsUnknown: true, answers: []api.Assignments{
		{NodeID: "edge-1", SessionGeneration: 2, Liveness: "READY", Index: 11, AppliedIndex: 11, Attempts: []api.Assignment{assignment("RESERVED", "true")}},
	}}
	ag := runAgentWith(t, c, func(a *Agent) { a.startDeadline = 300 * time.Millisecond })
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		_, reports := c.state()
		for _, r := range reports {
			if r.Complete != nil {
				if r.AttemptID != "att-1" || r.Complete.State != api.AttemptLost || r.Complete.LeaseVersion != 7 {
					t.Fatalf("report: %+v %+v", r, r.Complete)
				}
				if started, _, _ := ag.Stats(); started != 0 {
					t.Fatalf("the attempt ran (%d started)", started)
				}
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the unconfirmed start was never reported")
}

// An attempt whose process has ended leaves the cluster's list when its
// result commits, which may come before the report's answer: that is not
// a take-back, and the agent neither logs it as one nor stops anything.
// A running attempt that leaves the list is stopped, and said so.
func TestAnEndedAttemptLeavingTheListIsNotTakenBack(t *testing.T) {
	var logs strings.Builder
	a := &Agent{
		logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}),
		cfg:    Config{Slots: 2}, running: map[string]*execution{}, finished: map[string]bool{}, leftovers: map[string]int{},
	}
	cancelled := map[string]bool{}
	for _, id := range []string{"reporting", "running"} {
		a.running[id] = &execution{cancel: func(error) { cancelled[id] = true }, ended: id == "reporting"}
	}
	a.reconcile(context.Background(), &api.Assignments{NodeID: "edge-1"})
	if cancelled["reporting"] || strings.Contains(logs.String(), "attempt=reporting") {
		t.Fatalf("the ended attempt was taken back: cancelled %v, log %q", cancelled, logs.String())
	}
	if !cancelled["running"] || !strings.Contains(logs.String(), "taken back by the cluster") {
		t.Fatalf("the running attempt was not stopped: cancelled %v, log %q", cancelled, logs.String())
	}
}
