package httpapi

import (
	"errors"
	"fmt"
	"herd/api"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// handlerCase is one request to a handler over a fakeBackend, and what
// must come back.
type handlerCase struct {
	name           string
	method, target string
	body           string
	header         map[string]string
	setup          func(*fakeBackend)
	status         int
	code           string // the error body's code, if any
	contains       string // a substring of the body
	call           string // the backend call made ("" for none)
	contentType    string // the answer's type, when not JSON
}

func (c handlerCase) run(t *testing.T) *httptest.ResponseRecorder {
	t.Helper()
	f := newFake()
	if c.setup != nil {
		c.setup(f)
	}
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(c.method, c.target, body)
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	NewHandler(f, nil).ServeHTTP(rec, req)
	if rec.Code != c.status {
		t.Fatalf("%s %s: status %d, want %d: %s", c.method, c.target, rec.Code, c.status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" && c.contains != "archive" && c.contentType != ct {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	if rec.Code >= 400 {
		var e api.ErrorResponse
		if err := jsonUnmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
			t.Errorf("error answer is not a JSON error: %q (%v)", rec.Body, err)
		}
		if e.Code != c.code {
			t.Errorf("error code %q, want %q (%s)", e.Code, c.code, e.Error)
		}
		if rec.Code == http.StatusServiceUnavailable && rec.Header().Get("Retry-After") == "" {
			t.Error("a 503 without Retry-After")
		}
	}
	if c.contains != "" && !strings.Contains(rec.Body.String(), c.contains) {
		t.Errorf("body %q lacks %q", rec.Body, c.contains)
	}
	calls := f.Calls()
	switch {
	case c.call == "" && len(calls) != 0:
		t.Errorf("backend called %v, want no call", calls)
	case c.call != "" && !slices.Contains(calls, c.call):
		t.Errorf("backend calls %v, want %q", calls, c.call)
	}
	return rec
}

func failWith(method string, err error) func(*fakeBackend) {
	return func(f *fakeBackend) { f.errs[method] = err }
}

var (
	errStale     = &api.CodedError{Code: "stale_result", Err: fmt.Errorf("lease 1 is not current: %w", api.ErrConflict)}
	errLostLead  = &api.CodedError{Code: api.CodeOutcomeUnknown, Err: fmt.Errorf("leadership lost: %w", api.ErrNotLeader)}
	errNotFound  = fmt.Errorf("task t9: %w", api.ErrNotFound)
	errBadSpec   = fmt.Errorf("command is empty: %w", api.ErrBadRequest)
	errNotLeader = &api.CodedError{Code: api.CodeNotApplied, Err: fmt.Errorf("not the leader: %w", api.ErrNotLeader)}
)

const (
	validSpec   = `{"command":["true"],"name":"n"}`
	validReport = `{"reports":[{"attempt_id":"a1","start":{"lease_version":1}}]}`
)

// handlerCases covers every route: its answer, its validation, and how
// backend errors reach the client.
var handlerCases = []handlerCase{
	// status
	{name: "leader", method: "GET", target: "/v1/status/leader", status: 200, contains: `"fake1"`, call: "Leader"},
	{name: "leader unknown", method: "GET", target: "/v1/status/leader", setup: failWith("Leader", fmt.Errorf("none: %w", api.ErrNoLeader)), status: 503, call: "Leader"},
	{name: "self", method: "GET", target: "/v1/status/self", status: 200, call: "Self"},
	{name: "gossip", method: "GET", target: "/v1/status/gossip", status: 200, call: "GossipInfo"},
	{name: "raft configuration", method: "GET", target: "/v1/operator/raft/configuration", status: 200, call: "RaftConfiguration"},
	{name: "raft configuration fails", method: "GET", target: "/v1/operator/raft/configuration", setup: failWith("RaftConfiguration", errors.New("disk")), status: 500, call: "RaftConfiguration"},
	{name: "raft stats", method: "GET", target: "/v1/operator/raft/stats", status: 200, contains: `"Leader"`, call: "RaftStats"},
	{name: "check state", method: "GET", target: "/v1/operator/debug/check-state", status: 200, contains: `"ok":true`, call: "CheckState"},
	{name: "scheduler", method: "GET", target: "/v1/operator/scheduler", status: 200, call: "SchedulerStatus"},
	{name: "scheduler without a leader", method: "GET", target: "/v1/operator/scheduler", setup: func(f *fakeBackend) { f.leader = false }, status: 503, code: api.CodeNotApplied},

	// operator
	{name: "remove peer", method: "DELETE", target: "/v1/operator/raft/peer?id=s2", status: 200, contains: `"removed":"s2"`, call: "RemovePeer s2"},
	{name: "remove peer without id", method: "DELETE", target: "/v1/operator/raft/peer", status: 400},
	{name: "remove peer bad id", method: "DELETE", target: "/v1/operator/raft/peer?id=a%20b", status: 400},
	{name: "remove unknown peer", method: "DELETE", target: "/v1/operator/raft/peer?id=s9", setup: failWith("RemovePeer", errNotFound), status: 404, call: "RemovePeer s9"},
	{name: "join", method: "POST", target: "/v1/operator/raft/join", body: `{"id":"s4","raft_address":"h:1","http_address":"h:2"}`, status: 200, contains: `"joined":"s4"`, call: "Join s4"},
	{name: "join incomplete", method: "POST", target: "/v1/operator/raft/join", body: `{"id":"s4"}`, status: 400},
	{name: "join refused", method: "POST", target: "/v1/operator/raft/join", body: `{"id":"s4","raft_address":"h:1","http_address":"h:2"}`, setup: failWith("Join", fmt.Errorf("forms: %w", api.ErrConflict)), status: 409, call: "Join s4"},
	{name: "transfer leadership", method: "PUT", target: "/v1/operator/raft/transfer-leadership?id=s2", status: 200, call: "TransferLeadership s2"},
	{name: "transfer leadership anywhere", method: "PUT", target: "/v1/operator/raft/transfer-leadership", status: 200, call: "TransferLeadership "},
	{name: "transfer leadership bad id", method: "PUT", target: "/v1/operator/raft/transfer-leadership?id=..", status: 400},
	{name: "transfer leadership times out", method: "PUT", target: "/v1/operator/raft/transfer-leadership", setup: failWith("TransferLeadership", fmt.Errorf("transfer: %w", api.ErrTimeout)), status: 504, call: "TransferLeadership "},
	{name: "snapshot save", method: "GET", target: "/v1/operator/snapshot", status: 200, contains: "archive", call: "SnapshotSave"},
	{name: "snapshot save fails", method: "GET", target: "/v1/operator/snapshot", setup: failWith("SnapshotSave", errors.New("no snapshot")), status: 500, call: "SnapshotSave"},
	{name: "snapshot restore", method: "PUT", target: "/v1/operator/snapshot", body: "archive", status: 200, contains: "restored", call: "SnapshotRestore"},
	{name: "snapshot restore refused", method: "PUT", target: "/v1/operator/snapshot", body: "junk", setup: failWith("SnapshotRestore", fmt.Errorf("checksum: %w", api.ErrBadRequest)), status: 400, call: "SnapshotRestore"},

	// gossip keyring
	{name: "keyring", method: "GET", target: "/v1/operator/gossip/keyring", status: 200, contains: `"primary":"k"`, call: "GossipKeyring"},
	{name: "keyring unencrypted", method: "GET", target: "/v1/operator/gossip/keyring", setup: failWith("GossipKeyring", fmt.Errorf("plain: %w", api.ErrBadRequest)), status: 400, call: "GossipKeyring"},
	{name: "keyring install", method: "POST", target: "/v1/operator/gossip/keyring", body: `{"op":"install","key":"a2V5"}`, status: 200, call: "ChangeGossipKeyring install"},
	{name: "keyring bad op", method: "POST", target: "/v1/operator/gossip/keyring", body: `{"op":"drop","key":"a2V5"}`, status: 400},

	// acl
	{name: "acl bootstrap", method: "POST", target: "/v1/acl/bootstrap", status: 200, contains: `"secret_id":"s"`, call: "BootstrapACL"},
	{name: "acl bootstrap again", method: "POST", target: "/v1/acl/bootstrap", setup: failWith("BootstrapACL", fmt.Errorf("done: %w", api.ErrConflict)), status: 409, call: "BootstrapACL"},
	{name: "acl policies", method: "GET", target: "/v1/acl/policies", status: 200, contains: `"management"`},
	{name: "acl tokens", method: "GET", target: "/v1/acl/tokens", status: 200, call: "ListTokens"},
	{name: "acl tokens fail", method: "GET", target: "/v1/acl/tokens", setup: failWith("ListTokens", errors.New("disk")), status: 500, call: "ListTokens"},
	{name: "acl token create", method: "POST", target: "/v1/acl/tokens", body: `{"policies":["read"]}`, status: 200, call: "CreateToken"},
	{name: "acl token create bad body", method: "POST", target: "/v1/acl/tokens", body: `{"policy":"read"}`, status: 400},
	{name: "acl token", method: "GET", target: "/v1/acl/tokens/tok1", status: 200, call: "GetToken tok1"},
	{name: "acl token unknown", method: "GET", target: "/v1/acl/tokens/tok9", setup: failWith("GetToken", errNotFound), status: 404, call: "GetToken tok9"},
	{name: "acl token delete", method: "DELETE", target: "/v1/acl/tokens/tok1", status: 200, call: "DeleteToken tok1"},
	{name: "acl token delete bad id", method: "DELETE", target: "/v1/acl/tokens/a%20b", status: 400},
	{name: "acl token self", method: "GET", target: "/v1/acl/token/self", setup: func(f *fakeBackend) {
		f.acl = true
		f.tokens[HashSecret("sec")] = api.ACLToken{AccessorID: "me", Policies: []string{"read"}}
	}, header: map[string]string{api.HeaderToken: "sec"}, status: 200, contains: `"me"`, call: "GetToken me"},
	{name: "acl token self without acls", method: "GET", target: "/v1/acl/token/self", status: 400},
	{name: "audit", method: "GET", target: "/v1/operator/audit?after=3&limit=10", status: 200, call: "AuditLog"},
	{name: "audit bad after", method: "GET", target: "/v1/operator/audit?after=x", status: 400},

	// tasks
	{name: "submit", method: "POST", target: "/v1/tasks", body: validSpec, status: 201, contains: `"id":"t1"`, call: "SubmitTask n"},
	{name: "submit existing key", method: "POST", target: "/v1/tasks", body: validSpec, setup: func(f *fakeBackend) { f.created = false }, status: 200, call: "SubmitTask n"},
	{name: "submit empty body", method: "POST", target: "/v1/tasks", status: 400, contains: "empty"},
	{name: "submit unknown field", method: "POST", target: "/v1/tasks", body: `{"comand":["true"]}`, status: 400, contains: `unknown field \"comand\" (did you mean \"command\"?)`},
	{name: "submit two values", method: "POST", target: "/v1/tasks", body: validSpec + validSpec, status: 400, contains: "exactly one"},
	{name: "submit wrong type", method: "POST", target: "/v1/tasks", body: `{"command":"true"}`, status: 400, contains: `must be []string`},
	{name: "submit invalid UTF-8", method: "POST", target: "/v1/tasks", body: "{\"name\":\"\xff\"}", status: 400, contains: "UTF-8"},
	{name: "submit too large", method: "POST", target: "/v1/tasks", body: `{"name":"` + strings.Repeat("x", api.MaxRequestBytes) + `"}`, status: 413},
	{name: "submit refused", method: "POST", target: "/v1/tasks", body: validSpec, setup: failWith("SubmitTask", errBadSpec), status: 400, call: "SubmitTask n"},
	{name: "submit outcome unknown", method: "POST", target: "/v1/tasks", body: validSpec, setup: failWith("SubmitTask", errLostLead), status: 503, code: api.CodeOutcomeUnknown, call: "SubmitTask n"},
	{name: "submit on a full disk", method: "POST", target: "/v1/tasks", body: validSpec, setup: failWith("SubmitTask", &api.CodedError{Code: api.CodeNotApplied, Err: fmt.Errorf("no space left: %w", api.ErrUnavailable)}), status: 503, code: api.CodeNotApplied, call: "SubmitTask n"},
	{name: "submit not applied", method: "POST", target: "/v1/tasks", body: validSpec, setup: failWith("SubmitTask", errNotLeader), status: 503, code: api.CodeNotApplied, call: "SubmitTask n"},
	{name: "batch", method: "POST", target: "/v1/tasks/batch", body: `{"tasks":[` + validSpec + `]}`, status: 200, call: "SubmitTasks 1"},
	{name: "batch empty", method: "POST", target: "/v1/tasks/batch", body: `{"tasks":[]}`, status: 400},
	{name: "batch too large", method: "POST", target: "/v1/tasks/batch", body: `{"tasks":[` + strings.TrimSuffix(strings.Repeat(`{},`, api.MaxBatchTasks+1), ",") + `]}`, status: 400, contains: "at most"},
	{name: "get task", method: "GET", target: "/v1/tasks/t1", status: 200, call: "GetTask t1"},
	{name: "get missing task", method: "GET", target: "/v1/tasks/t9", setup: failWith("GetTask", errNotFound), status: 404, call: "GetTask t9"},
	{name: "get task bad id", method: "GET", target: "/v1/tasks/a%20b", status: 400, contains: "task id"},
	{name: "list tasks", method: "GET", target: "/v1/tasks?state=pending&limit=5&after=t1", status: 200, call: "ListTasks PENDING t1 5"},
	{name: "list tasks default limit", method: "GET", target: "/v1/tasks", status: 200, call: fmt.Sprintf("ListTasks   %d", api.DefaultListLimit)},
	{name: "list tasks limit too high", method: "GET", target: fmt.Sprintf("/v1/tasks?limit=%d", api.MaxListLimit+1), status: 400},
	{name: "list tasks bad after", method: "GET", target: "/v1/tasks?after=a%20b", status: 400},
	{name: "list tasks bad state", method: "GET", target: "/v1/tasks?state=nope", setup: failWith("ListTasks", fmt.Errorf("state NOPE: %w", api.ErrBadRequest)), status: 400, call: "ListTasks NOPE  100"},
	{name: "explain task", method: "GET", target: "/v1/tasks/t1/explain", status: 200, call: "ExplainTask t1"},
	{name: "explain task bad id", method: "GET", target: "/v1/tasks/%2e%2e/explain", status: 400},
	{name: "explain missing task", method: "GET", target: "/v1/tasks/t9/explain", setup: failWith("ExplainTask", errNotFound), status: 404, call: "ExplainTask t9"},
	{name: "cancel", method: "POST", target: "/v1/tasks/t1/cancel", body: `{"reason":"no longer needed"}`, status: 200, call: "CancelTask t1 no longer needed"},
	{name: "cancel without body", method: "POST", target: "/v1/tasks/t1/cancel", status: 200, call: "CancelTask t1 "},
	{name: "cancel reason too long", method: "POST", target: "/v1/tasks/t1/cancel", body: `{"reason":"` + strings.Repeat("r", api.MaxErrorText+1) + `"}`, status: 400},
	{name: "cancel finished", method: "POST", target: "/v1/tasks/t1/cancel", setup: failWith("CancelTask", fmt.Errorf("SUCCEEDED: %w", api.ErrConflict)), status: 409, call: "CancelTask t1 "},
	{name: "explain what-if", method: "POST", target: "/v1/explain", body: `{"resources":{"cpu_millis":32000}}`, status: 200, call: "ExplainSpec"},
	{name: "explain what-if bad body", method: "POST", target: "/v1/explain", body: `[]`, status: 400},

	// nodes
	{name: "list nodes", method: "GET", target: "/v1/nodes", status: 200, contains: `"nodes":[`, call: "ListNodes"},
	{name: "list nodes fails", method: "GET", target: "/v1/nodes", setup: failWith("ListNodes", errors.New("state")), status: 500, call: "ListNodes"},
	{name: "register", method: "POST", target: "/v1/nodes/register", body: `{"id":"n1","slots":2}`, status: 200, call: "RegisterNode n1"},
	{name: "register refused", method: "POST", target: "/v1/nodes/register", body: `{"id":"n1"}`, setup: failWith("RegisterNode", fmt.Errorf("slots: %w", api.ErrBadRequest)), status: 400, call: "RegisterNode n1"},
	{name: "register bad body", method: "POST", target: "/v1/nodes/register", body: `{"id":`, status: 400, contains: "truncated"},
	{name: "get node", method: "GET", target: "/v1/nodes/n1", status: 200, call: "GetNode n1"},
	{name: "get missing node", method: "GET", target: "/v1/nodes/n9", setup: failWith("GetNode", errNotFound), status: 404, call: "GetNode n9"},
	{name: "get node bad id", method: "GET", target: "/v1/nodes/a%20b", status: 400, contains: "node id"},
	{name: "assignments", method: "GET", target: "/v1/nodes/n1/assignments?index=5&wait=2s&known=d", status: 200, call: "Assignments n1 5 2s d"},
	{name: "assignments bad index", method: "GET", target: "/v1/nodes/n1/assignments?index=-1", status: 400},
	{name: "assignments bad held", method: "GET", target: "/v1/nodes/n1/assignments?held=x", status: 400},
	{name: "assignments wait too long", method: "GET", target: "/v1/nodes/n1/assignments?wait=6m", status: 400},
	{name: "assignments bad wait", method: "GET", target: "/v1/nodes/n1/assignments?wait=soon", status: 400},
	{name: "assignments unknown node", method: "GET", target: "/v1/nodes/n9/assignments", setup: failWith("Assignments", errNotFound), status: 404, call: "Assignments n9 0 0s "},
	{name: "heartbeat", method: "POST", target: "/v1/nodes/n1/heartbeat", body: `{}`, status: 200, call: "Heartbeat n1"},
	{name: "heartbeat old session", method: "POST", target: "/v1/nodes/n1/heartbeat", body: `{}`, setup: failWith("Heartbeat", &api.CodedError{Code: "session_changed", Err: api.ErrConflict}), status: 409, code: "session_changed", call: "Heartbeat n1"},
	{name: "conditions", method: "PUT", target: "/v1/nodes/n1/conditions", body: `{"session_generation":3,"conditions":[{"type":"disk_full","message":"2 MiB free"}]}`, status: 200, call: "SetNodeConditions n1 3 [disk_full]"},
	{name: "conditions cleared", method: "PUT", target: "/v1/nodes/n1/conditions", body: `{"session_generation":3,"conditions":[]}`, status: 200, call: "SetNodeConditions n1 3 []"},
	{name: "conditions old session", method: "PUT", target: "/v1/nodes/n1/conditions", body: `{"session_generation":2,"conditions":[]}`, setup: failWith("SetNodeConditions", &api.CodedError{Code: "session_changed", Err: api.ErrConflict}), status: 409, code: "session_changed", call: "SetNodeConditions n1 2 []"},
	{name: "conditions not a list", method: "PUT", target: "/v1/nodes/n1/conditions", body: `{"conditions":"full"}`, status: 400},
	{name: "heartbeat bad id", method: "POST", target: "/v1/nodes/a%20b/heartbeat", body: `{}`, status: 400},
	{name: "task log", method: "GET", target: "/v1/tasks/t1/logs?attempt=2&tail=100&follow=true", status: 200, call: "TaskLog t1 2 100 true", contains: "line 1", contentType: "text/plain; charset=utf-8"},
	{name: "node images", method: "GET", target: "/v1/nodes/n1/images", status: 200, call: "NodeImages n1", contains: `"runtime":"runc 1.1.5"`},
	{name: "node images of a DOWN node", method: "GET", target: "/v1/nodes/n1/images", setup: failWith("NodeImages", fmt.Errorf("n1 is DOWN: %w", api.ErrConflict)), status: 409, call: "NodeImages n1"},
	{name: "image pull", method: "POST", target: "/v1/nodes/n1/images/pull", body: `{"ref":"registry.lan/tools:1"}`, status: 200, call: "PullImage n1 registry.lan/tools:1", contains: `"names":["registry.lan/tools:1"]`},
	{name: "image pull without ref", method: "POST", target: "/v1/nodes/n1/images/pull", body: `{}`, status: 400, contains: "ref is required"},
	{name: "image pull unknown field", method: "POST", target: "/v1/nodes/n1/images/pull", body: `{"image":"x"}`, status: 400, contains: `unknown field \"image\"`},
	{name: "image pull refused by the registry", method: "POST", target: "/v1/nodes/n1/images/pull", body: `{"ref":"x:1"}`, setup: failWith("PullImage", fmt.Errorf("node n1: pull x:1: unknown image or tag: %w", api.ErrConflict)), status: 409, call: "PullImage n1 x:1", contains: "unknown image or tag"},
	{name: "image import", method: "POST", target: "/v1/nodes/n1/images/import?tag=a:1&tag=b:2", body: "ARCHIVE", status: 200, call: "ImportImage n1 ARCHIVE a:1,b:2", contains: `"digest":"sha256:bb"`},
	{name: "image import bad archive", method: "POST", target: "/v1/nodes/n1/images/import", body: "junk", setup: failWith("ImportImage", fmt.Errorf("node n1: not an image archive: %w", api.ErrBadRequest)), status: 400, call: "ImportImage n1 junk ", contains: "not an image archive"},
	{name: "dashboard", method: "GET", target: "/ui/", status: 200, contains: "<title>herd</title>", contentType: "text/html; charset=utf-8"},
	{name: "dashboard script", method: "GET", target: "/ui/app.js", status: 200, contains: "/v1/events", contentType: "text/javascript; charset=utf-8"},
	{name: "dashboard file missing", method: "GET", target: "/ui/nope.js", status: 404},
	{name: "events", method: "GET", target: "/v1/events?follow=false", status: 200, call: "ReadEvents 0 0 0", contains: `"kind":"ready"`, contentType: "application/x-ndjson"},
	{name: "events of a topic", method: "GET", target: "/v1/events?index=5&offset=1&topic=node:n1&follow=false", status: 200, call: "ReadEvents 5 1 1", contains: `"key":"n1"`, contentType: "application/x-ndjson"},
	{name: "events lost", method: "GET", target: "/v1/events?index=1&follow=false", status: 200, call: "ReadEvents 1 0 0", contains: `"lost":{"from_index":1,"to_index":2}`, contentType: "application/x-ndjson"},
	{name: "events bad index", method: "GET", target: "/v1/events?index=x", status: 400},
	{name: "events bad topic", method: "GET", target: "/v1/events?topic=attempt", status: 400},
	{name: "events bad follow", method: "GET", target: "/v1/events?follow=maybe", status: 400},
	{name: "events fail", method: "GET", target: "/v1/events", setup: failWith("ReadEvents", errors.New("disk")), status: 500, call: "ReadEvents 0 0 0"},
	{name: "task log bad attempt", method: "GET", target: "/v1/tasks/t1/logs?attempt=0", status: 400},
	{name: "task log node down", method: "GET", target: "/v1/tasks/t1/logs", setup: failWith("TaskLog", fmt.Errorf("node edge-1 is DOWN: %w", api.ErrConflict)), status: 409, call: "TaskLog t1 0 0 false"},
	{name: "metrics", method: "GET", target: "/metrics", status: 200, call: "Metrics", contains: "herd_up 1", contentType: "text/plain; charset=utf-8"},
	{name: "job", method: "POST", target: "/v1/jobs", body: `{"name":"p","stages":[{"name":"a","task":{"command":["true"]}}]}`, status: 201, call: "SubmitJob p 1"},
	{name: "job again", method: "POST", target: "/v1/jobs", body: `{"name":"p","idempotency_key":"seen","stages":[{"name":"a","task":{"command":["true"]}}]}`, status: 200, call: "SubmitJob p 1"},
	{name: "job unknown field", method: "POST", target: "/v1/jobs", body: `{"name":"p","stagez":[]}`, status: 400, contains: `(did you mean \"stages\"?)`},
	{name: "job list", method: "GET", target: "/v1/jobs?limit=5", status: 200, call: "ListJobs  5"},
	{name: "job list bad limit", method: "GET", target: "/v1/jobs?limit=0", status: 400},
	{name: "job get", method: "GET", target: "/v1/jobs/j1", status: 200, call: "GetJob j1"},
	{name: "job get missing", method: "GET", target: "/v1/jobs/j9", setup: failWith("GetJob", errNotFound), status: 404, call: "GetJob j9"},
	{name: "job cancel", method: "POST", target: "/v1/jobs/j1/cancel", body: `{"reason":"enough"}`, status: 200, call: "CancelJob j1 enough"},
	{name: "job cancel missing", method: "POST", target: "/v1/jobs/j9/cancel", setup: failWith("CancelJob", errNotFound), status: 404, call: "CancelJob j9 "},
	{name: "profile", method: "PUT", target: "/v1/nodes/n1/profile", body: `{"session_generation":3,"profile":{"cores":4,"benchmarked":true}}`, status: 200, call: "ReportProfile n1 3 4"},
	{name: "profile old session", method: "PUT", target: "/v1/nodes/n1/profile", body: `{"session_generation":2,"profile":{"cores":4}}`, setup: failWith("ReportProfile", &api.CodedError{Code: "session_changed", Err: api.ErrConflict}), status: 409, code: "session_changed", call: "ReportProfile n1 2 4"},
	{name: "datasets", method: "PUT", target: "/v1/nodes/n1/datasets", body: `{"session_generation":3,"datasets":[{"name":"cam-7","bytes":1024}]}`, status: 200, call: "ReportDatasets n1 3 1"},
	{name: "datasets not a list", method: "PUT", target: "/v1/nodes/n1/datasets", body: `{"datasets":{"cam-7":1}}`, status: 400},
	{name: "health check answer", method: "POST", target: "/v1/nodes/n1/health-check", body: `{"seq":2,"passed":true}`, status: 200, call: "ReportHealthCheck n1 2 true"},
	{name: "health check stale", method: "POST", target: "/v1/nodes/n1/health-check", body: `{"seq":1,"passed":true}`, setup: failWith("ReportHealthCheck", &api.CodedError{Code: "stale", Err: api.ErrConflict}), status: 409, code: "stale", call: "ReportHealthCheck n1 1 true"},
	{name: "health check request", method: "POST", target: "/v1/nodes/n1/health-check/request", body: `{}`, status: 200, call: "RequestHealthCheck n1"},
	{name: "health check request missing node", method: "POST", target: "/v1/nodes/n9/health-check/request", body: `{}`, setup: failWith("RequestHealthCheck", errNotFound), status: 404, call: "RequestHealthCheck n9"},
	{name: "link probe", method: "GET", target: "/v1/nodes/n1/probe?bytes=70000", status: 200, contentType: "application/octet-stream"},
	{name: "link probe too big", method: "GET", target: "/v1/nodes/n1/probe?bytes=99999999", status: 400, contains: "want 0..4194304"},
	{name: "tier pin", method: "POST", target: "/v1/nodes/n1/tier", body: `{"tier":"L3"}`, status: 200, call: "SetNodeTier n1 L3"},
	{name: "tier auto", method: "POST", target: "/v1/nodes/n1/tier", body: `{"tier":"auto"}`, status: 200, call: "SetNodeTier n1 auto"},
	{name: "tier unknown", method: "POST", target: "/v1/nodes/n1/tier", body: `{"tier":"L4"}`, status: 400},
	{name: "rebench", method: "POST", target: "/v1/nodes/n1/rebench", body: `{}`, status: 200, call: "RequestRebench n1"},
	{name: "rebench missing node", method: "POST", target: "/v1/nodes/n9/rebench", body: `{}`, setup: failWith("RequestRebench", errNotFound), status: 404, call: "RequestRebench n9"},
	{name: "drain", method: "POST", target: "/v1/nodes/n1/drain", body: `{"enable":true}`, status: 200, call: "DrainNode n1 true"},
	{name: "drain missing node", method: "POST", target: "/v1/nodes/n9/drain", body: `{"enable":true}`, setup: failWith("DrainNode", errNotFound), status: 404, call: "DrainNode n9 true"},
	{name: "drain without body", method: "POST", target: "/v1/nodes/n1/drain", status: 400},
	{name: "eligibility", method: "POST", target: "/v1/nodes/n1/eligibility", body: `{"eligible":false}`, status: 200, call: "SetNodeEligibility n1 false"},
	{name: "eligibility wrong type", method: "POST", target: "/v1/nodes/n1/eligibility", body: `{"eligible":"no"}`, status: 400},
	{name: "eligibility missing node", method: "POST", target: "/v1/nodes/n9/eligibility", body: `{"eligible":true}`, setup: failWith("SetNodeEligibility", errNotFound), status: 404, call: "SetNodeEligibility n9 true"},

	// attempts
	{name: "start", method: "POST", target: "/v1/attempts/a1/start", body: `{"lease_version":1}`, status: 200, call: "StartAttempt a1"},
	{name: "start stale", method: "POST", target: "/v1/attempts/a1/start", body: `{"lease_version":1}`, setup: failWith("StartAttempt", errStale), status: 409, code: "stale_result", call: "StartAttempt a1"},
	{name: "start bad id", method: "POST", target: "/v1/attempts/a%20b/start", body: `{}`, status: 400},
	{name: "complete", method: "POST", target: "/v1/attempts/a1/complete", body: `{"lease_version":1,"state":"FAILED","exit_code":3}`, status: 200, call: "CompleteAttempt a1 FAILED"},
	{name: "complete stale", method: "POST", target: "/v1/attempts/a1/complete", body: `{"lease_version":1}`, setup: failWith("CompleteAttempt", errStale), status: 409, code: "stale_result", call: "CompleteAttempt a1 "},
	{name: "complete bad state", method: "POST", target: "/v1/attempts/a1/complete", body: `{"state":"RUNNING"}`, status: 400, contains: "must be"},
	{name: "complete tail too long", method: "POST", target: "/v1/attempts/a1/complete", body: `{"output_tail":"` + strings.Repeat("o", api.MaxOutputTail+1) + `"}`, status: 400, contains: "output_tail"},
	{name: "complete error too long", method: "POST", target: "/v1/attempts/a1/complete", body: `{"error":"` + strings.Repeat("e", api.MaxErrorText+1) + `"}`, status: 400, contains: "error is longer"},
	{name: "reports", method: "POST", target: "/v1/attempts/reports", body: validReport, status: 200, contains: `"results":[`, call: "ReportAttempts 1"},
	{name: "reports each answered", method: "POST", target: "/v1/attempts/reports", body: `{"reports":[{"attempt_id":"a1","start":{}},{"attempt_id":"a2","complete":{}}]}`,
		setup: func(f *fakeBackend) { f.outcomes = []api.ReportOutcome{{}, {Err: errStale}} }, status: 200, contains: `"status":409,"error":"lease 1 is not current: conflict","code":"stale_result"`, call: "ReportAttempts 2"},
	{name: "reports empty", method: "POST", target: "/v1/attempts/reports", body: `{"reports":[]}`, status: 400},
	{name: "reports too many", method: "POST", target: "/v1/attempts/reports", body: `{"reports":[` + strings.TrimSuffix(strings.Repeat(`{"attempt_id":"a","start":{}},`, api.MaxReportBatch+1), ",") + `]}`, status: 400, contains: fmt.Sprint(api.MaxReportBatch)},
	{name: "reports both kinds", method: "POST", target: "/v1/attempts/reports", body: `{"reports":[{"attempt_id":"a1","start":{},"complete":{}}]}`, status: 400, contains: "report 0"},
	{name: "reports bad attempt id", method: "POST", target: "/v1/attempts/reports", body: `{"reports":[{"attempt_id":"","start":{}}]}`, status: 400},
	{name: "reports bad result", method: "POST", target: "/v1/attempts/reports", body: `{"reports":[{"attempt_id":"a1","complete":{"state":"X"}}]}`, status: 400},
	{name: "reports batch fails", method: "POST", target: "/v1/attempts/reports", body: validReport, setup: failWith("ReportAttempts", errLostLead), status: 503, code: api.CodeOutcomeUnknown, call: "ReportAttempts 1"},
}

func TestHandlers(t *testing.T) {
	for _, c := range handlerCases {
		t.Run(c.name, func(t *testing.T) { c.run(t) })
	}
}

// Every route has a case that succeeds and one that fails: a route added
// without tests fails here. The routes in cannotFail answer what the
// replica holds in memory and have no failure to test.
func TestEveryRouteHasHandlerCases(t *testing.T) {
	mux := http.NewServeMux()
	h := NewHandler(newFake(), nil)
	for _, rt := range h.routes() {
		mux.HandleFunc(rt.method+" "+rt.pattern, func(http.ResponseWriter, *http.Request) {})
	}
	ok, failed := map[string]bool{}, map[string]bool{}
	for _, c := range handlerCases {
		_, pattern := mux.Handler(httptest.NewRequest(c.method, c.target, nil))
		if pattern == "" {
			t.Errorf("case %q: %s %s matches no route", c.name, c.method, c.target)
			continue
		}
		if c.status < 300 {
			ok[pattern] = true
		} else {
			failed[pattern] = true
		}
	}
	for _, rt := range h.routes() {
		key := rt.method + " " + rt.pattern
		if !ok[key] {
			t.Errorf("route %s has no case that succeeds", key)
		}
		if !failed[key] && !cannotFail[key] {
			t.Errorf("route %s has no case that fails", key)
		}
	}
}

var cannotFail = map[string]bool{"GET /v1/acl/policies": true, "GET /v1/status/self": true, "GET /v1/status/gossip": true, "GET /v1/operator/raft/stats": true, "GET /metrics": true, "GET /v1/operator/debug/check-state": true}

// A method a path does not serve is a JSON 405 naming the allowed ones;
// a path nobody serves is a JSON 404.
func TestWrongMethodAndUnknownPath(t *testing.T) {
	rec := handlerCase{method: "DELETE", target: "/v1/operator/snapshot", status: 405, contains: "not allowed"}.run(t)
	if got := rec.Header().Get("Allow"); got != "GET, PUT" {
		t.Errorf("Allow %q, want GET, PUT", got)
	}
	handlerCase{method: "GET", target: "/v1/nope", status: 404, contains: "no such endpoint"}.run(t)
}

// A panic in the backend is a JSON 500, not a dead replica.
func TestPanicIsA500(t *testing.T) {
	f := newFake()
	rec := httptest.NewRecorder()
	NewHandler(panicky{f}, nil).ServeHTTP(rec, httptest.NewRequest("GET", "/v1/nodes", nil))
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), "internal error") {
		t.Fatalf("panic answered %d %s", rec.Code, rec.Body)
	}
}

type panicky struct{ *fakeBackend }

func (panicky) ListNodes() ([]api.Node, error) { panic("boom") }

// Reads carry the freshness headers.
func TestReadsCarryFreshness(t *testing.T) {
	rec := handlerCase{method: "GET", target: "/v1/tasks/t1", status: 200, call: "GetTask t1"}.run(t)
	for k, want := range map[string]string{api.HeaderIndex: "42", api.HeaderLastContact: "1500", api.HeaderKnownLeader: "true"} {
		if got := rec.Header().Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	// The assignments answer's index is the node's, not the replica's.
	rec = handlerCase{method: "GET", target: "/v1/nodes/n1/assignments", status: 200, call: "Assignments n1 0 0s "}.run(t)
	if got := rec.Header().Get(api.HeaderIndex); got != "9" {
		t.Errorf("assignments %s = %q, want 9", api.HeaderIndex, got)
	}
}

// A ?consistent read on the leader waits for ConsistentRead first, and
// answers its error when leadership cannot be confirmed.
func TestConsistentReadOnTheLeader(t *testing.T) {
	handlerCase{method: "GET", target: "/v1/tasks/t1?consistent", status: 200, call: "ConsistentRead"}.run(t)
	handlerCase{method: "GET", target: "/v1/tasks/t1?consistent", setup: failWith("ConsistentRead", errNotLeader), status: 503, code: api.CodeNotApplied, call: "ConsistentRead"}.run(t)
}

// leaderStub is a leader a follower forwards to: it records what reached
// it and answers 200.
func leaderStub(t *testing.T) (*httptest.Server, chan *http.Request) {
	got := make(chan *http.Request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		got <- r
		writeJSON(w, http.StatusOK, map[string]string{"answered_by": "leader"})
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// On a follower, every leader-only route and every ?consistent read is
// forwarded to the leader unchanged, marked as forwarded; local routes and
// plain reads are answered in place.
func TestFollowerForwardsWhatOnlyTheLeaderAnswers(t *testing.T) {
	srv, got := leaderStub(t)
	bodies := map[string]string{}
	for _, c := range handlerCases {
		if c.status < 300 && c.body != "" {
			bodies[c.method+" "+c.target] = c.body
		}
	}
	f := newFake()
	f.leader, f.leaderAddr = false, strings.TrimPrefix(srv.URL, "http://")
	h := NewHandler(f, nil)
	for _, rt := range h.routes() {
		target := strings.ReplaceAll(rt.pattern, "{id}", "x1")
		query := ""
		if rt.pattern == "/v1/events" {
			query = "follow=false&" // the stream ends once it has sent what there is
		}
		body := ""
		for k, b := range bodies {
			if strings.HasPrefix(k, rt.method+" "+target) {
				body = b
			}
		}
		for _, consistent := range []bool{false, true} {
			path := target
			if query != "" {
				path += "?" + strings.TrimSuffix(query, "&")
			}
			if consistent {
				path = target + "?" + query + "consistent"
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(rt.method, path, strings.NewReader(body)))
			forwarded := rt.where == leaderOnly || (rt.where == readable && consistent)
			select {
			case r := <-got:
				if !forwarded {
					t.Errorf("%s %s was forwarded", rt.method, path)
					continue
				}
				b, _ := io.ReadAll(r.Body)
				if r.Method != rt.method || r.URL.RequestURI() != path || string(b) != body || r.Header.Get(api.HeaderForwarded) != "fake1" {
					t.Errorf("%s %s reached the leader as %s %s %q (forwarded by %q)", rt.method, path, r.Method, r.URL.RequestURI(), b, r.Header.Get(api.HeaderForwarded))
				}
				if rec.Code != 200 || !strings.Contains(rec.Body.String(), "answered_by") {
					t.Errorf("%s %s: the leader's answer did not come back: %d %s", rt.method, path, rec.Code, rec.Body)
				}
			default:
				if forwarded {
					t.Errorf("%s %s was answered by the follower (%d), not forwarded", rt.method, path, rec.Code)
				}
			}
		}
	}
}

// Forwarding that cannot happen says whether the request ran: not_applied
// when it never reached a leader, outcome_unknown when the leader went
// away mid-request.
func TestForwardingFailures(t *testing.T) {
	follower := func(f *fakeBackend, addr string) { f.leader, f.leaderAddr = false, addr }
	handlerCase{name: "no leader known", method: "POST", target: "/v1/tasks", body: validSpec,
		setup: func(f *fakeBackend) { follower(f, "") }, status: 503, code: api.CodeNotApplied, contains: "no cluster leader"}.run(t)

	// A request forwarded once is not forwarded again.
	f := newFake()
	follower(f, "127.0.0.1:1")
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/v1/tasks", strings.NewReader(validSpec))
	req.Header.Set(api.HeaderForwarded, "s2")
	NewHandler(f, nil).ServeHTTP(rec, req)
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), api.CodeNotApplied) || !strings.Contains(rec.Body.String(), "forwarded by s2") {
		t.Errorf("forwarded twice: %d %s", rec.Code, rec.Body)
	}

	// A leader that refuses connections.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	handlerCase{name: "leader unreachable", method: "POST", target: "/v1/tasks", body: validSpec,
		setup: func(f *fakeBackend) { follower(f, dead) }, status: 503, code: api.CodeNotApplied, contains: "unreachable"}.run(t)

	// A leader that takes the request and drops the connection.
	drop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer drop.Close()
	handlerCase{name: "leader lost mid-request", method: "POST", target: "/v1/tasks", body: validSpec,
		setup: func(f *fakeBackend) { follower(f, strings.TrimPrefix(drop.URL, "http://")) }, status: 503, code: api.CodeOutcomeUnknown, contains: "outcome unknown"}.run(t)
}

// A follower that does not know a node yet (it registered a moment ago
// and the follower has not applied it) sends the image routes for it to
// the leader with their bodies, instead of answering 404; a follower that
// knows it asks the agent itself, and the leader answers 404 itself.
func TestImageRoutesForAnUnknownNodeGoToTheLeader(t *testing.T) {
	srv, got := leaderStub(t)
	for _, c := range []struct{ method, target, body string }{
		{"GET", "/v1/nodes/n1/images", ""},
		{"POST", "/v1/nodes/n1/images/pull", `{"ref":"registry.lan/tools:1"}`},
		{"POST", "/v1/nodes/n1/images/import?tag=a:1", "ARCHIVE BYTES"},
	} {
		f := newFake()
		f.leader, f.leaderAddr = false, strings.TrimPrefix(srv.URL, "http://")
		f.errs["GetNode"] = errNotFound
		rec := httptest.NewRecorder()
		NewHandler(f, nil).ServeHTTP(rec, httptest.NewRequest(c.method, c.target, strings.NewReader(c.body)))
		select {
		case r := <-got:
			b, _ := io.ReadAll(r.Body)
			if r.URL.RequestURI() != c.target || strings.TrimSpace(string(b)) != c.body || rec.Code != 200 {
				t.Errorf("%s %s reached the leader as %s %q, answered %d", c.method, c.target, r.URL.RequestURI(), b, rec.Code)
			}
		default:
			t.Errorf("%s %s for an unknown node was answered by the follower: %d %s", c.method, c.target, rec.Code, rec.Body)
		}

		f = newFake()
		f.leader, f.leaderAddr = false, strings.TrimPrefix(srv.URL, "http://")
		rec = httptest.NewRecorder()
		NewHandler(f, nil).ServeHTTP(rec, httptest.NewRequest(c.method, c.target, strings.NewReader(c.body)))
		select {
		case <-got:
			t.Errorf("%s %s for a known node was forwarded", c.method, c.target)
		default:
		}

		f = newFake()
		f.errs["GetNode"] = errNotFound
		f.errs["NodeImages"], f.errs["PullImage"], f.errs["ImportImage"] = errNotFound, errNotFound, errNotFound
		rec = httptest.NewRecorder()
		NewHandler(f, nil).ServeHTTP(rec, httptest.NewRequest(c.method, c.target, strings.NewReader(c.body)))
		if rec.Code != 404 {
			t.Errorf("%s %s on the leader for an unknown node: %d %s", c.method, c.target, rec.Code, rec.Body)
		}
	}
}
