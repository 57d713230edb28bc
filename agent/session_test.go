package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"herd/api"
)

// staleReplica plays a cluster whose first assignments answer comes from a
// replica that has not applied the agent's registration (session 2) yet:
// it still shows the attempt the agent's previous run started as
// RESERVED. Later answers are current: the attempt is RUNNING.
type staleReplica struct {
	mu          sync.Mutex
	assignments int
	reports     []api.AttemptReportItem
}

func (s *staleReplica) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	attempt := api.Attempt{ID: "att-1", TaskID: "task-1", Number: 1, NodeID: "edge-1", LeaseVersion: 7}
	switch r.URL.Path {
	case "/v1/status/gossip":
		_ = json.NewEncoder(w).Encode(api.GossipInfo{}) // no gossip
	case "/v1/nodes/register":
		_ = json.NewEncoder(w).Encode(api.RegisterResponse{NodeID: "edge-1", SessionGeneration: 2, Index: 10})
	case "/v1/nodes/edge-1/heartbeat":
		_ = json.NewEncoder(w).Encode(api.HeartbeatResponse{Liveness: "READY", SessionGeneration: 2})
	case "/v1/nodes/edge-1/assignments":
		s.mu.Lock()
		s.assignments++
		first := s.assignments == 1
		s.mu.Unlock()
		out := api.Assignments{NodeID: "edge-1", SessionGeneration: 2, Liveness: "READY", Index: 10}
		x := api.Assignment{Attempt: attempt}
		if first {
			out.SessionGeneration, out.Index = 1, 8
			x.Attempt.State = "RESERVED"
			x.Spec = api.TaskSpec{Command: []string{"true"}}
		} else {
			x.Attempt.State = "RUNNING"
		}
		out.Attempts = []api.Assignment{x}
		_ = json.NewEncoder(w).Encode(out)
	case "/v1/attempts/reports":
		var req api.AttemptReportBatch
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var resp api.AttemptReportBatchResponse
		s.mu.Lock()
		for _, rep := range req.Reports {
			s.reports = append(s.reports, rep)
			resp.Results = append(resp.Results, api.AttemptReportResult{Report: &api.AttemptReport{Attempt: attempt}})
		}
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(resp)
	default:
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(api.ErrorResponse{Error: "no such route"})
	}
}

func (s *staleReplica) reported() []api.AttemptReportItem {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]api.AttemptReportItem(nil), s.reports...)
}

// A restarted agent does not act on assignments older than its session:
// the replica answering first lags, and starting the attempt it shows as
// RESERVED would run again what the agent's previous run started. Once the
// registration has reached the replica, the attempt reads RUNNING and the
// agent reports it LOST.
func TestAgentIgnoresAssignmentsOlderThanItsSession(t *testing.T) {
	srv := &staleReplica{}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	ag, err := New(Config{
		ID: "edge-1", Servers: []string{hs.URL}, DataDir: t.TempDir(), Slots: 1, Limits: "none",
		HeartbeatInterval: time.Second, AssignmentWait: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ag.Run(ctx) }()
	defer func() { cancel(); <-done }()

	deadline := time.Now().Add(10 * time.Second)
	for {
		reports := srv.reported()
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
