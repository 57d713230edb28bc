// Package api is herd's HTTP JSON interface: the handlers every replica
// serves, the Backend interface they need from a replica, and the Go
// client the CLI and agents use. Followers forward writes (and
// ?consistent reads) to the leader, so a client may talk to any replica.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/http/pprof"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
)

// Headers describing how fresh a read is, and the loop guard for forwarding.
const (
	HeaderIndex       = "X-Herd-Index"
	HeaderLastContact = "X-Herd-Last-Contact"
	HeaderKnownLeader = "X-Herd-Known-Leader"
	HeaderForwarded   = "X-Herd-Forwarded-By"
)

// Body limits: ordinary requests are small; snapshot restores are not.
const (
	MaxRequestBytes  = 1 << 20
	MaxSnapshotBytes = 4 << 30
)

// ReadMeta describes the replica's view when it answered a read.
type ReadMeta struct {
	Index       uint64
	LastContact time.Duration // since the leader was last heard; 0 on the leader
	KnownLeader bool
}

// Backend is what the HTTP layer needs from a replica. Methods marked
// leader-only are only called on the leader; a replica that lost
// leadership meanwhile returns an error wrapping ErrNotLeader.
type Backend interface {
	ID() string
	IsLeader() bool
	// LeaderHTTPAddress is where to forward leader-only requests.
	LeaderHTTPAddress() (string, bool)
	ReadMeta() ReadMeta
	// ConsistentRead (leader-only) confirms leadership with a quorum and
	// waits until everything committed before the call is applied locally.
	ConsistentRead(ctx context.Context) error
	Self() SelfInfo
	GossipInfo() GossipInfo
	Leader() (LeaderInfo, error)
	RaftConfiguration() (RaftConfiguration, error)
	RaftStats() map[string]string
	SchedulerStatus() SchedulerStatus // leader-only

	Join(ctx context.Context, req JoinRequest) error                                // leader-only
	RemovePeer(ctx context.Context, id string) error                                // leader-only
	TransferLeadership(ctx context.Context, targetID string) error                  // leader-only
	SnapshotSave(ctx context.Context, w io.Writer) error                            // leader-only
	SnapshotRestore(ctx context.Context, r io.Reader) error                         // leader-only
	SubmitTask(ctx context.Context, spec TaskSpec) (Task, bool, uint64, error)      // leader-only
	SubmitTasks(ctx context.Context, specs []TaskSpec) (BatchSubmitResponse, error) // leader-only

	GetTask(id string) (Task, error)
	ListTasks(q TaskQuery) (TaskList, error)
	ExplainTask(id string) (Explanation, error)
	ExplainSpec(req ExplainRequest) (Explanation, error)

	RegisterNode(ctx context.Context, reg NodeRegistration) (RegisterResponse, error)                  // leader-only
	Heartbeat(ctx context.Context, nodeID string, req HeartbeatRequest) (HeartbeatResponse, error)     // leader-only
	StartAttempt(ctx context.Context, id string, req AttemptStartRequest) (AttemptReport, error)       // leader-only
	CompleteAttempt(ctx context.Context, id string, req AttemptCompleteRequest) (AttemptReport, error) // leader-only
	// ReportAttempts commits a validated batch of reports in one entry and
	// answers each (an error only when the batch as a whole failed).
	ReportAttempts(ctx context.Context, reports []AttemptReportItem) ([]ReportOutcome, error) // leader-only
	CancelTask(ctx context.Context, id string, reason string) (Task, error)                   // leader-only
	// Assignments blocks until the node's attempts changed after q.Index
	// (and, with q.Known, differ from that set), or q.Wait passed, then
	// answers from the local state.
	Assignments(ctx context.Context, nodeID string, q AssignmentsQuery) (Assignments, error)
	DrainNode(ctx context.Context, nodeID string, enable bool) (Node, error)            // leader-only
	SetNodeEligibility(ctx context.Context, nodeID string, eligible bool) (Node, error) // leader-only
	GetNode(id string) (Node, error)
	ListNodes() ([]Node, error)
}

// Handler serves the API of one replica.
type Handler struct {
	backend Backend
	logger  hclog.Logger
	mux     *http.ServeMux
	// forwardTransport carries requests forwarded to the leader; nil means
	// http.DefaultTransport.
	forwardTransport http.RoundTripper
}

// WithForwardTransport sets the transport for requests forwarded to the
// leader (the replica's own dialer, so fault tests can cut that link too).
func (h *Handler) WithForwardTransport(rt http.RoundTripper) *Handler {
	h.forwardTransport = rt
	return h
}

// WithDebug serves Go's runtime profiles under /debug/pprof/ (for
// operators chasing CPU or memory; see the enable_debug setting).
func (h *Handler) WithDebug() *Handler {
	h.mux.HandleFunc("/debug/pprof/", pprof.Index)
	h.mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	h.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	h.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	h.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return h
}

// NewHandler builds the HTTP handler for a replica.
func NewHandler(b Backend, logger hclog.Logger) *Handler {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	h := &Handler{
		backend: b,
		logger:  logger.Named("http"),
		mux:     http.NewServeMux(),
	}
	h.routes()
	return h
}

// route dispatches by method so that a wrong method gets a JSON 405.
type route map[string]http.HandlerFunc

func (h *Handler) handle(pattern string, r route) {
	h.mux.HandleFunc(pattern, func(w http.ResponseWriter, req *http.Request) {
		fn, ok := r[req.Method]
		if !ok {
			allowed := make([]string, 0, len(r))
			for m := range r {
				allowed = append(allowed, m)
			}
			w.Header().Set("Allow", strings.Join(slices.Sorted(slices.Values(allowed)), ", "))
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s", req.Method, req.URL.Path))
			return
		}
		fn(w, req)
	})
}

func (h *Handler) routes() {
	h.handle("/v1/status/leader", route{http.MethodGet: h.getLeader})
	h.handle("/v1/status/self", route{http.MethodGet: h.getSelf})
	h.handle("/v1/status/gossip", route{http.MethodGet: func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, h.backend.GossipInfo())
	}})
	h.handle("/v1/operator/raft/configuration", route{http.MethodGet: h.getRaftConfiguration})
	h.handle("/v1/operator/raft/stats", route{http.MethodGet: h.getRaftStats})
	h.handle("/v1/operator/scheduler", route{http.MethodGet: h.leaderOnly(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, h.backend.SchedulerStatus())
	})})
	h.handle("/v1/operator/raft/peer", route{http.MethodDelete: h.leaderOnly(h.deletePeer)})
	h.handle("/v1/operator/raft/join", route{http.MethodPost: h.leaderOnly(h.postJoin)})
	h.handle("/v1/operator/raft/transfer-leadership", route{http.MethodPut: h.leaderOnly(h.putTransferLeadership)})
	h.handle("/v1/operator/snapshot", route{
		http.MethodGet: h.leaderOnly(h.getSnapshot),
		http.MethodPut: h.leaderOnly(h.putSnapshot),
	})
	h.handle("/v1/tasks", route{
		http.MethodGet:  h.read(h.listTasks),
		http.MethodPost: h.leaderOnly(h.postTask),
	})
	h.handle("/v1/tasks/batch", route{http.MethodPost: h.leaderOnly(h.postTaskBatch)})
	h.handle("/v1/tasks/{id}", route{http.MethodGet: h.read(h.getTask)})
	h.handle("/v1/tasks/{id}/explain", route{http.MethodGet: h.read(h.getTaskExplain)})
	h.handle("/v1/tasks/{id}/cancel", route{http.MethodPost: h.leaderOnly(h.postCancel)})
	h.handle("/v1/attempts/{id}/start", route{http.MethodPost: h.leaderOnly(h.postAttemptStart)})
	h.handle("/v1/attempts/{id}/complete", route{http.MethodPost: h.leaderOnly(h.postAttemptComplete)})
	h.handle("/v1/attempts/reports", route{http.MethodPost: h.leaderOnly(h.postAttemptReports)})
	h.handle("/v1/nodes/{id}/assignments", route{http.MethodGet: h.read(h.getAssignments)})
	h.handle("/v1/explain", route{http.MethodPost: h.read(h.postExplain)})
	h.handle("/v1/nodes", route{http.MethodGet: h.read(h.listNodes)})
	h.handle("/v1/nodes/register", route{http.MethodPost: h.leaderOnly(h.postRegisterNode)})
	h.handle("/v1/nodes/{id}", route{http.MethodGet: h.read(h.getNode)})
	h.handle("/v1/nodes/{id}/heartbeat", route{http.MethodPost: h.leaderOnly(h.postHeartbeat)})
	h.handle("/v1/nodes/{id}/drain", route{http.MethodPost: h.leaderOnly(h.postDrain)})
	h.handle("/v1/nodes/{id}/eligibility", route{http.MethodPost: h.leaderOnly(h.postEligibility)})
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
	})
}

// ServeHTTP recovers from handler panics so that one bad request cannot
// take the replica down; the panic is logged and answered with a 500.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			h.logger.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", p)
			writeError(w, http.StatusInternalServerError, "internal error")
		}
	}()
	if _, pretty := r.URL.Query()["pretty"]; pretty {
		w = prettyWriter{w}
	}
	h.mux.ServeHTTP(w, r)
}

// prettyWriter marks a response to be indented (?pretty). By default
// answers are compact: agents and the CLI read them, and indenting every
// assignment list was 2% of a busy cluster's CPU.
type prettyWriter struct{ http.ResponseWriter }

// Unwrap lets http.ResponseController reach the connection's writer.
func (p prettyWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// leaderOnly runs fn on the leader and forwards the request to it from
// anywhere else. A request that was already forwarded once is not
// forwarded again (leadership moved under it): the client retries.
func (h *Handler) leaderOnly(fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.backend.IsLeader() {
			fn(w, r)
			return
		}
		h.forward(w, r)
	}
}

// proxyBuffers lends forwarded responses their copy buffers: without a
// pool the proxy allocates 32 KiB for every request a follower forwards
// (3% of all the bytes a busy end-to-end run allocated).
type proxyBuffers struct{}

var proxyBufferPool = sync.Pool{New: func() any { return new([32 << 10]byte) }}

func (proxyBuffers) Get() []byte { return proxyBufferPool.Get().(*[32 << 10]byte)[:] }

func (proxyBuffers) Put(b []byte) {
	if len(b) == 32<<10 {
		proxyBufferPool.Put((*[32 << 10]byte)(b))
	}
}

func (h *Handler) forward(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(HeaderForwarded) != "" {
		writeNoLeader(w, fmt.Sprintf("%s: forwarded by %s but not the leader (leadership is changing)", h.backend.ID(), r.Header.Get(HeaderForwarded)))
		return
	}
	addr, ok := h.backend.LeaderHTTPAddress()
	if !ok {
		writeNoLeader(w, "no cluster leader is known; retry shortly")
		return
	}
	target := &url.URL{Scheme: "http", Host: addr}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = addr
			pr.Out.Header.Set(HeaderForwarded, h.backend.ID())
		},
		FlushInterval: -1,
		Transport:     h.forwardTransport,
		BufferPool:    proxyBuffers{},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			h.logger.Warn("forwarding to leader failed", "leader", addr, "error", err)
			var op *net.OpError
			if errors.As(err, &op) && op.Op == "dial" {
				writeNoLeader(w, fmt.Sprintf("leader at %s unreachable: %v", addr, err))
				return
			}
			// The request may have reached the leader before the link broke.
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusServiceUnavailable, ErrorResponse{
				Error: fmt.Sprintf("lost the leader at %s mid-request (outcome unknown): %v", addr, err), Code: CodeOutcomeUnknown,
			})
		},
	}
	proxy.ServeHTTP(w, r)
}

// read serves a read locally, or through the leader with ?consistent, and
// sets the freshness headers.
func (h *Handler) read(fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, consistent := r.URL.Query()["consistent"]; consistent {
			if !h.backend.IsLeader() {
				h.forward(w, r)
				return
			}
			if err := h.backend.ConsistentRead(r.Context()); err != nil {
				writeErr(w, err)
				return
			}
		}
		meta := h.backend.ReadMeta()
		w.Header().Set(HeaderIndex, strconv.FormatUint(meta.Index, 10))
		w.Header().Set(HeaderLastContact, strconv.FormatInt(meta.LastContact.Milliseconds(), 10))
		w.Header().Set(HeaderKnownLeader, strconv.FormatBool(meta.KnownLeader))
		fn(w, r)
	}
}

func (h *Handler) getLeader(w http.ResponseWriter, _ *http.Request) {
	l, err := h.backend.Leader()
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}

func (h *Handler) getSelf(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, h.backend.Self())
}

func (h *Handler) getRaftConfiguration(w http.ResponseWriter, _ *http.Request) {
	c, err := h.backend.RaftConfiguration()
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (h *Handler) getRaftStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, h.backend.RaftStats())
}

func (h *Handler) deletePeer(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if !ValidID(id) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("query parameter id %q is not a valid server id", id))
		return
	}
	if err := h.backend.RemovePeer(r.Context(), id); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"removed": id})
}

func (h *Handler) postJoin(w http.ResponseWriter, r *http.Request) {
	var req JoinRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if !ValidID(req.ID) || req.RaftAddress == "" || req.HTTPAddress == "" {
		writeError(w, http.StatusBadRequest, "join needs a valid id, raft_address and http_address")
		return
	}
	if err := h.backend.Join(r.Context(), req); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"joined": req.ID})
}

func (h *Handler) putTransferLeadership(w http.ResponseWriter, r *http.Request) {
	target := r.URL.Query().Get("id")
	if target != "" && !ValidID(target) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("query parameter id %q is not a valid server id", target))
		return
	}
	if err := h.backend.TransferLeadership(r.Context(), target); err != nil {
		writeErr(w, err)
		return
	}
	l, err := h.backend.Leader()
	if err != nil {
		writeJSON(w, http.StatusOK, map[string]string{"result": "leadership transferred"})
		return
	}
	writeJSON(w, http.StatusOK, l)
}

func (h *Handler) getSnapshot(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="herd.snap"`)
	// Once bytes are streamed the status is sent; a later failure can only
	// cut the stream short, which the archive's checksum reveals on restore.
	sw := &statusWriter{ResponseWriter: w}
	if err := h.backend.SnapshotSave(r.Context(), sw); err != nil {
		if !sw.wrote {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Del("Content-Disposition")
			writeErr(w, err)
			return
		}
		h.logger.Error("snapshot stream failed midway", "error", err)
	}
}

func (h *Handler) putSnapshot(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, MaxSnapshotBytes)
	if err := h.backend.SnapshotRestore(r.Context(), r.Body); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("snapshot larger than %d bytes", mbe.Limit))
			return
		}
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"result": "snapshot restored"})
}

func (h *Handler) postTask(w http.ResponseWriter, r *http.Request) {
	var spec TaskSpec
	if !decodeBody(w, r, &spec) {
		return
	}
	task, created, index, err := h.backend.SubmitTask(r.Context(), spec)
	if err != nil {
		writeErr(w, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/v1/tasks/"+task.ID)
	}
	writeJSON(w, status, SubmitResponse{ID: task.ID, State: task.State, Index: index})
}

func (h *Handler) postTaskBatch(w http.ResponseWriter, r *http.Request) {
	var req BatchSubmitRequest
	if !decodeBody(w, r, &req) {
		return
	}
	switch n := len(req.Tasks); {
	case n == 0:
		writeError(w, http.StatusBadRequest, "a batch needs at least one task")
		return
	case n > MaxBatchTasks:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("a batch holds at most %d tasks, got %d: send several", MaxBatchTasks, n))
		return
	}
	res, err := h.backend.SubmitTasks(r.Context(), req.Tasks)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (h *Handler) getTask(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !ValidID(id) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%q is not a valid task id", id))
		return
	}
	t, err := h.backend.GetTask(id)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (h *Handler) getTaskExplain(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !ValidID(id) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%q is not a valid task id", id))
		return
	}
	ex, err := h.backend.ExplainTask(id)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ex)
}

func (h *Handler) postExplain(w http.ResponseWriter, r *http.Request) {
	var req ExplainRequest
	if !decodeBody(w, r, &req) {
		return
	}
	ex, err := h.backend.ExplainSpec(req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ex)
}

// nodeID validates the {id} path segment of node endpoints.
func nodeID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !ValidID(id) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%q is not a valid node id", id))
		return "", false
	}
	return id, true
}

func (h *Handler) postRegisterNode(w http.ResponseWriter, r *http.Request) {
	var reg NodeRegistration
	if !decodeBody(w, r, &reg) {
		return
	}
	res, err := h.backend.RegisterNode(r.Context(), reg)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (h *Handler) postHeartbeat(w http.ResponseWriter, r *http.Request) {
	id, ok := nodeID(w, r)
	if !ok {
		return
	}
	var req HeartbeatRequest
	if !decodeBody(w, r, &req) {
		return
	}
	resp, err := h.backend.Heartbeat(r.Context(), id, req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// pathID validates an {id} path segment.
func pathID(w http.ResponseWriter, r *http.Request, what string) (string, bool) {
	id := r.PathValue("id")
	if !ValidID(id) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%q is not a valid %s id", id, what))
		return "", false
	}
	return id, true
}

func (h *Handler) postCancel(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "task")
	if !ok {
		return
	}
	var req CancelRequest
	if r.ContentLength != 0 && !decodeBody(w, r, &req) {
		return
	}
	if len(req.Reason) > MaxErrorText {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("reason is longer than %d bytes", MaxErrorText))
		return
	}
	t, err := h.backend.CancelTask(r.Context(), id, req.Reason)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (h *Handler) postAttemptStart(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "attempt")
	if !ok {
		return
	}
	var req AttemptStartRequest
	if !decodeBody(w, r, &req) {
		return
	}
	rep, err := h.backend.StartAttempt(r.Context(), id, req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// validateComplete checks a result report's fields.
func validateComplete(req *AttemptCompleteRequest) error {
	switch {
	case len(req.OutputTail) > MaxOutputTail:
		return fmt.Errorf("output_tail is longer than %d bytes", MaxOutputTail)
	case len(req.Error) > MaxErrorText:
		return fmt.Errorf("error is longer than %d bytes", MaxErrorText)
	}
	switch req.State {
	case "", "SUCCEEDED", "FAILED", "TIMED_OUT", "LOST":
		return nil
	}
	return fmt.Errorf("state %q must be SUCCEEDED, FAILED, TIMED_OUT or LOST", req.State)
}

// postAttemptReports takes a batch of starts and results. The batch is
// validated whole (one bad report refuses it all, 400) and then each
// report is answered on its own.
func (h *Handler) postAttemptReports(w http.ResponseWriter, r *http.Request) {
	var req AttemptReportBatch
	if !decodeBody(w, r, &req) {
		return
	}
	if len(req.Reports) == 0 || len(req.Reports) > MaxReportBatch {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("a batch holds 1 to %d reports, not %d", MaxReportBatch, len(req.Reports)))
		return
	}
	for i, rep := range req.Reports {
		var err error
		switch {
		case !ValidID(rep.AttemptID):
			err = fmt.Errorf("%q is not a valid attempt id", rep.AttemptID)
		case (rep.Start == nil) == (rep.Complete == nil):
			err = errors.New("a report has exactly one of start and complete")
		case rep.Complete != nil:
			err = validateComplete(rep.Complete)
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("report %d: %v", i, err))
			return
		}
	}
	outcomes, err := h.backend.ReportAttempts(r.Context(), req.Reports)
	if err != nil {
		writeErr(w, err)
		return
	}
	resp := AttemptReportBatchResponse{Results: make([]AttemptReportResult, len(outcomes))}
	for i, o := range outcomes {
		if o.Err != nil {
			status, body := errorAnswer(o.Err)
			resp.Results[i] = AttemptReportResult{Status: status, Error: body.Error, Code: body.Code}
			continue
		}
		resp.Results[i] = AttemptReportResult{Report: &o.Report}
	}
	writeJSON(w, http.StatusOK, resp)
}

func (h *Handler) postAttemptComplete(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "attempt")
	if !ok {
		return
	}
	var req AttemptCompleteRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if err := validateComplete(&req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	rep, err := h.backend.CompleteAttempt(r.Context(), id, req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// MaxWait bounds a blocking query.
const MaxWait = 5 * time.Minute

func (h *Handler) getAssignments(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "node")
	if !ok {
		return
	}
	q := r.URL.Query()
	var index uint64
	if v := q.Get("index"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("index %q must be a non-negative whole number", v))
			return
		}
		index = n
	}
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > MaxWait {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("wait %q must be a duration from 0 to %s", v, MaxWait))
			return
		}
		wait = d
	}
	as, err := h.backend.Assignments(r.Context(), id, AssignmentsQuery{Index: index, Wait: wait, Known: q.Get("known")})
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set(HeaderIndex, strconv.FormatUint(as.Index, 10))
	writeJSON(w, http.StatusOK, as)
}

func (h *Handler) postDrain(w http.ResponseWriter, r *http.Request) {
	id, ok := nodeID(w, r)
	if !ok {
		return
	}
	var req DrainRequest
	if !decodeBody(w, r, &req) {
		return
	}
	n, err := h.backend.DrainNode(r.Context(), id, req.Enable)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, n)
}

func (h *Handler) postEligibility(w http.ResponseWriter, r *http.Request) {
	id, ok := nodeID(w, r)
	if !ok {
		return
	}
	var req EligibilityRequest
	if !decodeBody(w, r, &req) {
		return
	}
	n, err := h.backend.SetNodeEligibility(r.Context(), id, req.Eligible)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, n)
}

func (h *Handler) getNode(w http.ResponseWriter, r *http.Request) {
	id, ok := nodeID(w, r)
	if !ok {
		return
	}
	n, err := h.backend.GetNode(id)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, n)
}

func (h *Handler) listNodes(w http.ResponseWriter, _ *http.Request) {
	nodes, err := h.backend.ListNodes()
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]Node{"nodes": nodes})
}

// Listing limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = 10000
)

func (h *Handler) listTasks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	query := TaskQuery{State: strings.ToUpper(q.Get("state")), After: q.Get("after"), Limit: DefaultListLimit}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q must be a whole number from 1 to %d", v, MaxListLimit))
			return
		}
		query.Limit = n
	}
	if query.After != "" && !ValidID(query.After) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("after %q is not a valid task id", query.After))
		return
	}
	list, err := h.backend.ListTasks(query)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// decodeBody reads a size-limited JSON body into v, rejecting unknown
// fields and trailing data; on failure it writes the 4xx and returns false.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		status, msg := describeDecodeError(err)
		writeError(w, status, msg)
		return false
	}
	// encoding/json would silently turn invalid UTF-8 into U+FFFD, storing
	// something other than what the client sent: refuse it instead.
	if !utf8.Valid(raw) {
		writeError(w, http.StatusBadRequest, "request body is not valid UTF-8")
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		status, msg := describeDecodeError(err)
		writeError(w, status, msg)
		return false
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, "request body must hold exactly one JSON value")
		return false
	}
	return true
}

func describeDecodeError(err error) (int, string) {
	var (
		mbe *http.MaxBytesError
		se  *json.SyntaxError
		ute *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", mbe.Limit)
	case errors.Is(err, io.EOF):
		return http.StatusBadRequest, "request body is empty; a JSON object is required"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return http.StatusBadRequest, "request body is truncated JSON"
	case errors.As(err, &se):
		return http.StatusBadRequest, fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &ute):
		field := ute.Field
		if field == "" {
			field = "body"
		}
		return http.StatusBadRequest, fmt.Sprintf("field %q must be %s, not JSON %s", field, ute.Type, ute.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return http.StatusBadRequest, "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	}
	return http.StatusBadRequest, "invalid request body: " + err.Error()
}

type statusWriter struct {
	http.ResponseWriter
	wrote bool
}

func (s *statusWriter) Write(p []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(p)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	if _, pretty := w.(prettyWriter); pretty {
		enc.SetIndent("", "  ")
	}
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, ErrorResponse{Error: msg})
}

// writeNoLeader answers 503 for a request that was not executed.
func writeNoLeader(w http.ResponseWriter, msg string) {
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusServiceUnavailable, ErrorResponse{Error: msg, Code: CodeNotApplied})
}

// writeErr maps a backend error to its status, keeping its code if any.
func writeErr(w http.ResponseWriter, err error) {
	status, body := errorAnswer(err)
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, body)
}

// errorAnswer maps a backend error to its HTTP status and body, keeping
// its code if any.
func errorAnswer(err error) (int, ErrorResponse) {
	body := ErrorResponse{Error: err.Error()}
	var ce *CodedError
	if errors.As(err, &ce) {
		body.Code = ce.Code
	}
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrBadRequest):
		status = http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, ErrConflict):
		status = http.StatusConflict
	case errors.Is(err, ErrNoLeader), errors.Is(err, ErrNotLeader):
		status = http.StatusServiceUnavailable
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		status = http.StatusGatewayTimeout
	case errors.Is(err, context.Canceled):
		status = 499 // client closed the request
	}
	return status, body
}
