package httpapi

import (
	"context"
	"errors"
	"fmt"
	"herd/api"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// ReadMeta describes the replica's view when it answered a read.
type ReadMeta struct {
	Index       uint64
	LastContact time.Duration // since the leader was last heard; 0 on the leader
	KnownLeader bool
}

// ReplicaBackend is what routing needs from a replica: who it is, whether
// it leads, where the leader is, and how fresh its reads are.
type ReplicaBackend interface {
	ID() string
	IsLeader() bool
	// LeaderHTTPAddress is where to forward leader-only requests.
	LeaderHTTPAddress() (string, bool)
	ReadMeta() ReadMeta
	// ConsistentRead, called on the leader only, confirms leadership with
	// a quorum and waits until everything committed before the call is
	// applied locally.
	ConsistentRead(ctx context.Context) error
}

// Backend is everything the HTTP layer needs from a replica, one role
// interface per endpoint family. The handler calls a method documented as
// leader-only only on the leader (it forwards the request from anywhere
// else); a replica that lost leadership meanwhile returns an error
// wrapping ErrNotLeader. Methods may be called concurrently, one call per
// request goroutine.
type Backend interface {
	ReplicaBackend
	StatusBackend
	OperatorBackend
	TaskBackend
	NodeBackend
	ProfileBackend
	JobBackend
	AttemptBackend
	ACLBackend
	EventBackend
}

// Handler serves the API of one replica.
type Handler struct {
	backend Backend
	logger  hclog.Logger
	mux     *http.ServeMux
	// forwardTransport carries requests forwarded to the leader; nil means
	// http.DefaultTransport.
	forwardTransport http.RoundTripper
	// https: the replicas serve the API over TLS, so forwarding dials
	// the leader with TLS.
	https bool
	// refused limits the audit records of refused operator requests.
	refused refusalLimiter
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
	byPattern := map[string]map[string]http.HandlerFunc{}
	for _, rt := range h.routes() {
		h.handle(byPattern, rt)
	}
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return h
}

// WithForwardTransport sets the transport for requests forwarded to the
// leader (the replica's own dialer, so fault tests can cut that link too).
func (h *Handler) WithForwardTransport(rt http.RoundTripper) *Handler {
	h.forwardTransport = rt
	return h
}

// WithHTTPS says that the replicas serve HTTPS: requests are forwarded to
// the leader over TLS (forwardTransport supplies this replica's
// certificate).
func (h *Handler) WithHTTPS() *Handler {
	h.https = true
	return h
}

func (h *Handler) scheme() string {
	if h.https {
		return "https"
	}
	return "http"
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

// Where an endpoint runs.
type placement int

const (
	// local: answered by whichever replica receives it.
	local placement = iota
	// leaderOnly: answered by the leader; other replicas forward it. A
	// request that was already forwarded once is not forwarded again
	// (leadership moved under it): the client retries.
	leaderOnly
	// readable: a read answered locally with the freshness headers, or
	// through the leader with ?consistent.
	readable
)

// endpoint answers one request: a value written as JSON with status 200
// (or a reply with another status), or an error (see errorAnswer). An
// endpoint that wrote its own answer returns written.
type endpoint func(w http.ResponseWriter, r *http.Request) (any, error)

// reply is an answer with a status other than 200.
type reply struct {
	status int
	body   any
}

// written marks an answer the endpoint already wrote (a stream).
type writtenAnswer struct{}

var written = writtenAnswer{}

// route is one method on one path, with where it runs. The table of
// routes is the API's surface: tests walk it so that no endpoint goes
// untested.
type route struct {
	method, pattern string
	where           placement
	// need is what the caller must hold (see Capability); a route on
	// /v1/nodes/{id} that an agent may use is also scoped to its node.
	need Capability
	fn   endpoint
}

// nodeScoped reports whether the route's {id} names the node it concerns.
func (rt route) nodeScoped() bool {
	return strings.HasPrefix(rt.pattern, "/v1/nodes/{id}") && (rt.need == capAgent || rt.need == capAgentOrRead)
}

func (h *Handler) routes() []route {
	var rs []route
	for _, family := range [][]route{h.statusRoutes(), h.operatorRoutes(), h.taskRoutes(), h.nodeRoutes(), h.profileRoutes(), h.jobRoutes(), h.attemptRoutes(), h.aclRoutes(), h.eventRoutes(), h.uiRoutes()} {
		rs = append(rs, family...)
	}
	return rs
}

// handle registers a route; routes sharing a pattern share one mux entry
// (byPattern holds each pattern's handlers by method), which answers any
// other method with a JSON 405.
func (h *Handler) handle(byPattern map[string]map[string]http.HandlerFunc, rt route) {
	byMethod, ok := byPattern[rt.pattern]
	if !ok {
		byMethod = map[string]http.HandlerFunc{}
		byPattern[rt.pattern] = byMethod
		h.mux.HandleFunc(rt.pattern, func(w http.ResponseWriter, req *http.Request) {
			fn, ok := byMethod[req.Method]
			if !ok {
				allowed := make([]string, 0, len(byMethod))
				for m := range byMethod {
					allowed = append(allowed, m)
				}
				w.Header().Set("Allow", strings.Join(slices.Sorted(slices.Values(allowed)), ", "))
				writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s", req.Method, req.URL.Path))
				return
			}
			fn(w, req)
		})
	}
	byMethod[rt.method] = h.wrap(rt, h.serve(rt.fn))
}

// serve runs an endpoint and writes what it returns.
func (h *Handler) serve(fn endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		out, err := fn(w, r)
		switch v := out.(type) {
		case writtenAnswer:
			return
		case reply:
			if err == nil {
				writeJSON(w, v.status, v.body)
				return
			}
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// wrap places a handler (forwarded to the leader, or served as a read)
// and guards it: the caller is authenticated and authorized where the
// request is answered, so a forwarded request is judged by the leader,
// by what its original caller may do.
func (h *Handler) wrap(rt route, fn http.HandlerFunc) http.HandlerFunc {
	guarded := func(w http.ResponseWriter, r *http.Request) {
		p, err := h.authenticate(r)
		if rt.need == capPublic && err != nil {
			p, err = Principal{Actor: "anonymous"}, nil
		}
		if err == nil {
			err = authorize(p, rt.need)
		}
		if err == nil && rt.nodeScoped() && p.Node != "" && r.PathValue("id") != p.Node {
			if h.mayForward(r) {
				// The leader answers, and records the refusal.
				h.forward(w, r)
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
			err = h.checkNode(r, r.PathValue("id"), rt.method+" "+rt.pattern, "node")
		}
		if errors.Is(err, errUnknownToken) {
			if h.mayForward(r) {
				// A token made a moment ago may not have reached this
				// replica yet; the leader holds every committed one.
				h.forward(w, r)
				return
			}
			err = unauthenticated("token not found (unknown or deleted)")
		}
		if err != nil {
			if rt.where == leaderOnly && rt.need.changesTheCluster() && p.Actor != "" && h.refused.allow(p.Actor, time.Now()) {
				// Someone with a credential tried what it does not allow.
				h.audit(r.WithContext(context.WithValue(r.Context(), principalKey{}, p)), "refused "+rt.method+" "+rt.pattern, r.URL.Path, err)
			}
			writeErr(w, err)
			return
		}
		ctx := context.WithValue(context.WithValue(r.Context(), principalKey{}, p), routeKey{}, rt)
		fn(w, r.WithContext(ctx))
	}
	switch rt.where {
	case leaderOnly:
		return func(w http.ResponseWriter, r *http.Request) {
			if h.backend.IsLeader() {
				guarded(w, r)
				return
			}
			h.forward(w, r)
		}
	case readable:
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
			w.Header().Set(api.HeaderIndex, strconv.FormatUint(meta.Index, 10))
			w.Header().Set(api.HeaderLastContact, strconv.FormatInt(meta.LastContact.Milliseconds(), 10))
			w.Header().Set(api.HeaderKnownLeader, strconv.FormatBool(meta.KnownLeader))
			guarded(w, r)
		}
	}
	return guarded
}

// mayForward reports whether a request answered locally could be sent to
// the leader instead: this replica does not lead and nobody forwarded it.
func (h *Handler) mayForward(r *http.Request) bool {
	return !h.backend.IsLeader() && r.Header.Get(api.HeaderForwarded) == ""
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

// pathID validates an {id} path segment naming a what. Jobs and tasks
// are named by refs: the ids the cluster makes for periodic runs and
// stage instances are longer than an id and hold an '@'.
func pathID(r *http.Request, what string) (string, error) {
	id := r.PathValue("id")
	valid := api.ValidID
	if what == "job" || what == "task" {
		valid = api.ValidRef
	}
	if !valid(id) {
		return "", badRequest("%q is not a valid %s id", id, what)
	}
	return id, nil
}
