package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"herd/api"
)

// reportServer answers batches (each report with its attempt id, a 409
// for ids starting with "stale") and records their sizes; hold, when set,
// keeps each batch request waiting until it is closed.
type reportServer struct {
	mu      sync.Mutex
	sizes   []int
	singles int
	hold    chan struct{}
	batch   bool // serve the batch endpoint (an older server does not)
}

func (s *reportServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/attempts/reports" && s.batch {
		var req api.AttemptReportBatch
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		s.mu.Lock()
		s.sizes = append(s.sizes, len(req.Reports))
		hold := s.hold
		s.mu.Unlock()
		if hold != nil {
			<-hold
		}
		var resp api.AttemptReportBatchResponse
		for _, rep := range req.Reports {
			if strings.HasPrefix(rep.AttemptID, "stale") {
				resp.Results = append(resp.Results, api.AttemptReportResult{Status: 409, Error: "stale lease", Code: "stale_result"})
				continue
			}
			resp.Results = append(resp.Results, api.AttemptReportResult{Report: &api.AttemptReport{Attempt: api.Attempt{ID: rep.AttemptID}}})
		}
		_ = json.NewEncoder(w).Encode(resp)
		return
	}
	if id, ok := strings.CutPrefix(r.URL.Path, "/v1/attempts/"); ok && !s.batch && id != "reports" {
		id, _, _ = strings.Cut(id, "/")
		s.mu.Lock()
		s.singles++
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(api.AttemptReport{Attempt: api.Attempt{ID: id}})
		return
	}
	w.WriteHeader(http.StatusNotFound)
	_ = json.NewEncoder(w).Encode(api.ErrorResponse{Error: "no such route"})
}

func startReporter(t *testing.T, srv *reportServer) *reporter {
	t.Helper()
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	cl, err := api.NewClient(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	r := newReporter(cl)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func startItem(id string) api.AttemptReportItem {
	return api.AttemptReportItem{AttemptID: id, Start: &api.AttemptStartRequest{LeaseVersion: 1}}
}

// Reports made while every sender is busy go together in the next batch,
// and each caller gets its own answer (a per-report 409 included).
func TestReporterBatchesWhatAccumulates(t *testing.T) {
	hold := make(chan struct{})
	srv := &reportServer{batch: true, hold: hold}
	r := startReporter(t, srv)
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(hold) }) }) // before the server closes
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type answer struct {
		id  string
		rep api.AttemptReport
		err error
	}
	answers := make(chan answer, 32)
	send := func(id string) {
		go func() {
			rep, err := r.report(ctx, startItem(id))
			answers <- answer{id, rep, err}
		}()
	}
	// Occupy both senders, then queue ten more behind them.
	for i := range reportSenders {
		send(fmt.Sprint("busy-", i))
		waitFor(t, func() bool { srv.mu.Lock(); defer srv.mu.Unlock(); return len(srv.sizes) == i+1 })
	}
	for i := range 9 {
		send(fmt.Sprint("queued-", i))
	}
	send("stale-1")
	waitFor(t, func() bool { return len(r.queue) == 10 })
	release.Do(func() { close(hold) })
	for range 12 {
		a := <-answers
		switch {
		case a.id == "stale-1":
			if !errors.Is(a.err, api.ErrConflict) {
				t.Errorf("stale-1: want a 409 of its own, got %v", a.err)
			}
		case a.err != nil || a.rep.Attempt.ID != a.id:
			t.Errorf("%s: got %+v, %v", a.id, a.rep, a.err)
		}
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	// Both senders free up at once: the ten queued go in one or two
	// batches, never one by one.
	if len(srv.sizes) > 4 || srv.sizes[0] != 1 || srv.sizes[1] != 1 {
		t.Fatalf("want two single reports then the ten queued in at most two batches, got batch sizes %v", srv.sizes)
	}
}

// Against a server without the batch endpoint, reports go one request
// each.
func TestReporterFallsBackToSingleReports(t *testing.T) {
	srv := &reportServer{}
	r := startReporter(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 3 {
		id := fmt.Sprint("a-", i)
		rep, err := r.report(ctx, startItem(id))
		if err != nil || rep.Attempt.ID != id {
			t.Fatalf("%s: got %+v, %v", id, rep, err)
		}
	}
	if !r.single.Load() || srv.singles != 3 {
		t.Fatalf("want three single requests after the batch endpoint was missing, got %d (single mode %v)", srv.singles, r.single.Load())
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
