package httpapi

import (
	"herd/api"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// routeCapabilities is every route with the capability it needs. A route
// added without an entry here fails TestEveryRouteDeclaresItsCapability.
var routeCapabilities = map[string]Capability{
	"GET /v1/status/leader":                     capAnyone,
	"GET /v1/status/self":                       capAnyone,
	"GET /v1/status/gossip":                     capAnyone,
	"GET /v1/operator/raft/configuration":       capRead,
	"GET /v1/operator/raft/stats":               capRead,
	"GET /metrics":                              capRead,
	"GET /v1/tasks/{id}/logs":                   capRead,
	"GET /v1/events":                            capRead,
	"GET /ui/":                                  capPublic,
	"GET /v1/nodes/{id}/images":                 capRead,
	"POST /v1/nodes/{id}/images/pull":           capSubmit,
	"POST /v1/nodes/{id}/images/import":         capOperator,
	"GET /v1/operator/scheduler":                capRead,
	"DELETE /v1/operator/raft/peer":             capOperator,
	"GET /v1/operator/gossip/keyring":           capAgentOrOperator,
	"POST /v1/operator/gossip/keyring":          capOperator,
	"POST /v1/operator/raft/join":               capServerOrOperator,
	"PUT /v1/operator/raft/transfer-leadership": capOperator,
	"GET /v1/operator/snapshot":                 capOperator,
	"GET /v1/operator/debug/check-state":        capOperator,
	"PUT /v1/operator/snapshot":                 capOperator,
	"GET /v1/operator/audit":                    capOperator,
	"GET /v1/tasks":                             capRead,
	"POST /v1/tasks":                            capSubmit,
	"POST /v1/tasks/batch":                      capSubmit,
	"GET /v1/tasks/{id}":                        capAgentOrRead,
	"GET /v1/tasks/{id}/explain":                capRead,
	"POST /v1/tasks/{id}/cancel":                capSubmit,
	"POST /v1/explain":                          capRead,
	"GET /v1/nodes":                             capRead,
	"POST /v1/nodes/register":                   capAgent,
	"GET /v1/nodes/{id}":                        capAgentOrRead,
	"GET /v1/nodes/{id}/assignments":            capAgentOrRead,
	"POST /v1/nodes/{id}/heartbeat":             capAgent,
	"PUT /v1/nodes/{id}/conditions":             capAgent,
	"PUT /v1/nodes/{id}/profile":                capAgent,
	"POST /v1/jobs":                             capSubmit,
	"GET /v1/jobs":                              capRead,
	"GET /v1/jobs/{id}":                         capRead,
	"POST /v1/jobs/{id}/cancel":                 capSubmit,
	"PUT /v1/nodes/{id}/datasets":               capAgent,
	"POST /v1/nodes/{id}/health-check":          capAgent,
	"GET /v1/nodes/{id}/probe":                  capAgent,
	"POST /v1/nodes/{id}/health-check/request":  capOperator,
	"POST /v1/nodes/{id}/tier":                  capOperator,
	"POST /v1/nodes/{id}/rebench":               capOperator,
	"POST /v1/nodes/{id}/drain":                 capOperator,
	"POST /v1/nodes/{id}/eligibility":           capOperator,
	"POST /v1/attempts/{id}/start":              capAgent,
	"POST /v1/attempts/{id}/complete":           capAgent,
	"POST /v1/attempts/reports":                 capAgent,
	"POST /v1/acl/bootstrap":                    capPublic,
	"GET /v1/acl/policies":                      capAnyone,
	"GET /v1/acl/tokens":                        capOperator,
	"POST /v1/acl/tokens":                       capManagement,
	"GET /v1/acl/tokens/{id}":                   capOperator,
	"DELETE /v1/acl/tokens/{id}":                capManagement,
	"GET /v1/acl/token/self":                    capAnyone,
}

func TestEveryRouteDeclaresItsCapability(t *testing.T) {
	seen := map[string]bool{}
	for _, rt := range NewHandler(newFake(), nil).routes() {
		key := rt.method + " " + rt.pattern
		seen[key] = true
		want, ok := routeCapabilities[key]
		switch {
		case !ok:
			t.Errorf("route %s is not in the capability table", key)
		case rt.need != want:
			t.Errorf("route %s needs %q, the table says %q", key, rt.need, want)
		}
	}
	for key := range routeCapabilities {
		if !seen[key] {
			t.Errorf("the table lists %s, which is not a route", key)
		}
	}
}

// The tokens of the ACL tests, by secret.
var testTokens = map[string]api.ACLToken{
	"mgmt": {AccessorID: "mgmt", Policies: []string{"management"}},
	"op":   {AccessorID: "op", Policies: []string{"operator"}},
	"rd":   {AccessorID: "rd", Policies: []string{"read"}},
	"sub":  {AccessorID: "sub", Policies: []string{"submit"}},
	"ag":   {AccessorID: "ag", Policies: []string{"agent"}, NodeID: "x1"},
}

// lacking names a token that does not hold the capability, and holding
// one that does.
var lacking = map[Capability][2]string{
	capRead: {"sub", "rd"}, capSubmit: {"rd", "sub"}, capOperator: {"rd", "op"}, capManagement: {"op", "mgmt"},
	capAgent: {"rd", "ag"}, capAgentOrRead: {"sub", "rd"}, capServerOrOperator: {"rd", "op"}, capAgentOrOperator: {"rd", "ag"},
	capAnyone: {"", "sub"}, capPublic: {"", ""},
}

func aclFake() *fakeBackend {
	f := newFake()
	f.acl = true
	for secret, tok := range testTokens {
		f.tokens[HashSecret(secret)] = tok
	}
	f.attemptNodes["x1"] = "x1"
	return f
}

// Every route with ACLs on: no token and an unknown one are 401, a token
// without the capability is 403, the right one passes; the same through a
// follower, which forwards what the leader answers.
func TestACLsOnEveryRoute(t *testing.T) {
	bodies := map[string]string{}
	for _, c := range handlerCases {
		if c.status < 300 && c.body != "" {
			bodies[c.method+" "+strings.SplitN(c.target, "?", 2)[0]] = c.body
		}
	}
	leader := NewHandler(aclFake(), nil)
	srv := httptest.NewServer(leader)
	defer srv.Close()
	ff := aclFake()
	ff.leader, ff.leaderAddr = false, strings.TrimPrefix(srv.URL, "http://")
	follower := NewHandler(ff, nil)

	for _, rt := range leader.routes() {
		key := rt.method + " " + rt.pattern
		target := strings.ReplaceAll(rt.pattern, "{id}", "x1")
		if rt.pattern == "/v1/operator/raft/peer" || rt.pattern == "/v1/operator/raft/transfer-leadership" {
			target += "?id=s2"
		}
		if rt.pattern == "/v1/events" {
			target += "?follow=false" // the stream ends once it has sent what there is
		}
		body := bodies[rt.method+" "+target]
		if body == "" {
			body = bodies[key]
		}
		if rt.pattern == "/v1/nodes/register" {
			body = `{"id":"x1","resources":{},"slots":1}`
		}
		for _, via := range []struct {
			name string
			h    http.Handler
		}{{"leader", leader}, {"follower", follower}} {
			do := func(token string) *httptest.ResponseRecorder {
				req := httptest.NewRequest(rt.method, target, strings.NewReader(body))
				if token != "" {
					req.Header.Set(api.HeaderToken, token)
				}
				rec := httptest.NewRecorder()
				via.h.ServeHTTP(rec, req)
				return rec
			}
			pair := lacking[rt.need]
			if rt.need != capPublic {
				if rec := do(""); rec.Code != 401 || !strings.Contains(rec.Body.String(), api.CodeUnauthenticated) {
					t.Errorf("%s via %s without a token: %d %s", key, via.name, rec.Code, rec.Body)
				}
				if rec := do("deleted"); rec.Code != 401 || !strings.Contains(rec.Body.String(), "token not found") {
					t.Errorf("%s via %s with an unknown token: %d %s", key, via.name, rec.Code, rec.Body)
				}
			}
			if pair[0] != "" {
				rec := do(pair[0])
				if rec.Code != 403 || !strings.Contains(rec.Body.String(), api.CodePermissionDenied) || !strings.Contains(rec.Body.String(), "needs") {
					t.Errorf("%s via %s with token %s: %d %s", key, via.name, pair[0], rec.Code, rec.Body)
				}
			}
			if rec := do(pair[1]); rec.Code == 401 || rec.Code == 403 {
				t.Errorf("%s via %s with token %q: %d %s", key, via.name, pair[1], rec.Code, rec.Body)
			}
		}
	}
}

// An agent's credentials act for its node only: another node's
// registration, heartbeat, assignments or attempts are 403, nothing
// reaches the backend, and the refusal is recorded against the agent's
// own node.
func TestAgentActsOnlyForItself(t *testing.T) {
	f := aclFake()
	f.attemptNodes["a2"] = "n2"
	f.attemptNodes["a1"] = "x1"
	h := NewHandler(f, nil)
	do := func(method, target, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, target, strings.NewReader(body))
		req.Header.Set(api.HeaderToken, "ag")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	refused := []struct{ method, target, body string }{
		{"POST", "/v1/nodes/register", `{"id":"n2","resources":{},"slots":1}`},
		{"POST", "/v1/nodes/n2/heartbeat", `{"session_generation":1}`},
		{"PUT", "/v1/nodes/n2/conditions", `{"session_generation":1}`},
		{"PUT", "/v1/nodes/n2/profile", `{"session_generation":1}`},
		{"PUT", "/v1/nodes/n2/datasets", `{"session_generation":1}`},
		{"POST", "/v1/nodes/n2/health-check", `{"seq":1}`},
		{"GET", "/v1/nodes/n2/assignments", ""},
		{"GET", "/v1/nodes/n2/probe?bytes=10", ""},
		{"POST", "/v1/attempts/a2/start", `{"lease_version":1}`},
		{"POST", "/v1/attempts/a2/complete", `{"lease_version":1,"state":"SUCCEEDED"}`},
		{"POST", "/v1/attempts/reports", `{"reports":[{"attempt_id":"a1","start":{"lease_version":1}},{"attempt_id":"a2","start":{"lease_version":1}}]}`},
		{"POST", "/v1/nodes/x1/drain", `{"enable":true}`},
	}
	for i, c := range refused {
		rec := do(c.method, c.target, c.body)
		if rec.Code != 403 || !strings.Contains(rec.Body.String(), "node x1") {
			t.Errorf("%s %s: %d %s", c.method, c.target, rec.Code, rec.Body)
		}
		if calls := f.Calls(); len(calls) != 0 {
			t.Errorf("%s %s reached the backend: %v", c.method, c.target, calls)
		}
		if i < 7 {
			if len(f.audited) != i+1 || f.audited[i].NodeID != "x1" || f.audited[i].Actor != "ag" {
				t.Errorf("%s %s: refusal not recorded against x1: %+v", c.method, c.target, f.audited)
			}
		}
	}
	for _, c := range []struct{ method, target, body string }{
		{"POST", "/v1/nodes/register", `{"id":"x1","resources":{},"slots":1}`},
		{"POST", "/v1/nodes/x1/heartbeat", `{"session_generation":1}`},
		{"GET", "/v1/nodes/x1/assignments", ""},
		{"POST", "/v1/attempts/a1/complete", `{"lease_version":1,"state":"SUCCEEDED"}`},
	} {
		if rec := do(c.method, c.target, c.body); rec.Code != 200 {
			t.Errorf("own %s %s: %d %s", c.method, c.target, rec.Code, rec.Body)
		}
	}
}

// A plain connection cannot claim a certificate identity by header.
func TestIdentityHeaderNeedsAServerConnection(t *testing.T) {
	h := NewHandler(aclFake(), nil)
	req := httptest.NewRequest("POST", "/v1/operator/raft/join", strings.NewReader(`{"id":"s4","raft_address":"h:1","http_address":"h:2"}`))
	req.Header.Set(api.HeaderIdentity, "server/s4")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 401 {
		t.Fatalf("identity header on a plain connection: %d %s", rec.Code, rec.Body)
	}
}

// A token limited to named submitters submits and cancels for them only.
func TestSubmitterScopedToken(t *testing.T) {
	f := aclFake()
	f.tokens[HashSecret("team")] = api.ACLToken{AccessorID: "team", Policies: []string{"submit"}, Submitters: []string{"etl"}}
	h := NewHandler(f, nil)
	for body, want := range map[string]int{
		`{"command":["true"],"submitter":"etl"}`: 201,
		`{"command":["true"],"submitter":"ops"}`: 403,
		`{"command":["true"]}`:                   403,
	} {
		req := httptest.NewRequest("POST", "/v1/tasks", strings.NewReader(body))
		req.Header.Set(api.HeaderToken, "team")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("%s: %d, want %d: %s", body, rec.Code, want, rec.Body)
		}
	}
}

// FuzzAuthenticate: whatever a request carries as its token, bearer or
// forwarded identity, the handler answers without panicking, and only the
// secrets of real tokens give rights: anything else is a 401.
func FuzzAuthenticate(f *testing.F) {
	for _, s := range []string{"", "mgmt", "rd", "Bearer mgmt", "server/s1", "agent/x1", "\x00", "mgmt\n", strings.Repeat("a", 5000)} {
		f.Add(s, s, s)
	}
	fake := aclFake()
	h := NewHandler(fake, nil)
	f.Fuzz(func(t *testing.T, token, bearer, identity string) {
		req := httptest.NewRequest("GET", "/v1/nodes", nil)
		// Header values a client could not send are dropped, as the
		// server's parser would.
		for k, v := range map[string]string{api.HeaderToken: token, "Authorization": "Bearer " + bearer, api.HeaderIdentity: identity} {
			if strings.ContainsAny(v, "\r\n\x00") {
				continue
			}
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		secret := req.Header.Get(api.HeaderToken)
		if secret == "" {
			secret, _ = strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
			secret = strings.TrimSpace(secret)
		}
		tok, known := testTokens[secret]
		switch {
		case known && (tok.AccessorID == "mgmt" || tok.AccessorID == "rd" || tok.AccessorID == "op"):
			if rec.Code != 200 {
				t.Fatalf("token %q: %d %s", secret, rec.Code, rec.Body)
			}
		case known:
			if rec.Code != 403 {
				t.Fatalf("token %q without read: %d", secret, rec.Code)
			}
		default:
			if rec.Code != 401 {
				t.Fatalf("unknown token %q (identity %q): %d %s", secret, identity, rec.Code, rec.Body)
			}
		}
	})
}
