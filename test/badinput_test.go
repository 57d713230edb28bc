package test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"herd/api"
)

type badRequest struct {
	method, path, body string
}

func badRequests() []badRequest {
	huge := `{"command":["` + strings.Repeat("x", 2<<20) + `"]}`
	return []badRequest{
		{"POST", "/v1/tasks", `{`},
		{"POST", "/v1/tasks", ``},
		{"POST", "/v1/tasks", `[]`},
		{"POST", "/v1/tasks", `{"command":"echo hi"}`},
		{"POST", "/v1/tasks", `{"command":["true"],"priority":"high"}`},
		{"POST", "/v1/tasks", `{"command":["true"],"priority":1e400}`},
		{"POST", "/v1/tasks", `{"command":["true"],"priority":99999999999999999999}`},
		{"POST", "/v1/tasks", `{"command":["true"],"colour":"red"}`},
		{"POST", "/v1/tasks", `{"command":["true"]} {"command":["true"]}`},
		{"POST", "/v1/tasks", `{"command":[]}`},
		{"POST", "/v1/tasks", `{"command":["true"],"priority":101}`},
		{"POST", "/v1/tasks", `{"command":["true"],"priority":-1}`},
		{"POST", "/v1/tasks", `{"command":["true"],"timeout_seconds":0}`},
		{"POST", "/v1/tasks", `{"command":["true"],"max_attempts":0}`},
		{"POST", "/v1/tasks", `{"command":["true"],"resources":{"cpu_millis":-5}}`},
		{"POST", "/v1/tasks", `{"command":["true"],"env":{"A=B":"x"}}`},
		{"POST", "/v1/tasks", "{\"command\":[\"\xff\xfe\"],\"name\":\"\xc3\x28\"}"},
		{"POST", "/v1/tasks", huge},
		{"DELETE", "/v1/tasks", ``},
		{"POST", "/v1/tasks/batch", `{"tasks":[]}`},
		{"POST", "/v1/tasks/batch", `{"tasks":[{"command":["true"]},{"command":["true"],"priority":101}]}`},
		{"POST", "/v1/tasks/batch", `{"tasks":[{"command":["true"],"colour":"red"}]}`},
		{"POST", "/v1/tasks/batch", `{"tasks":{"command":["true"]}}`},
		{"POST", "/v1/tasks/batch", `{"tasks":[` + strings.Repeat(`{"command":["true"]},`, api.MaxBatchTasks) + `{"command":["true"]}]}`},
		{"GET", "/v1/tasks/batch", ``},
		{"POST", "/v1/attempts/reports", `{"reports":[]}`},
		{"POST", "/v1/attempts/reports", `{"reports":[{"attempt_id":"a1"}]}`},
		{"POST", "/v1/attempts/reports", `{"reports":[{"attempt_id":"a1","start":{"lease_version":1},"complete":{"lease_version":1}}]}`},
		{"POST", "/v1/attempts/reports", `{"reports":[{"attempt_id":"bad id!","start":{"lease_version":1}}]}`},
		{"POST", "/v1/attempts/reports", `{"reports":[{"attempt_id":"a1","complete":{"lease_version":1,"state":"EXPLODED"}}]}`},
		{"POST", "/v1/attempts/reports", `{"reports":[{"attempt_id":"a1","start":{"lease_version":-1}}]}`},
		{"POST", "/v1/attempts/reports", `{"reports":[` + strings.Repeat(`{"attempt_id":"a1","start":{"lease_version":1}},`, api.MaxReportBatch) + `{"attempt_id":"a1","start":{"lease_version":1}}]}`},
		{"GET", "/v1/attempts/reports", ``},
		{"GET", "/v1/tasks/no-such-task", ``},
		{"GET", "/v1/tasks/" + strings.Repeat("a", 100), ``},
		{"GET", "/v1/tasks/bad%21id", ``},
		{"GET", "/v1/tasks/%00", ``},
		{"GET", "/v1/tasks?limit=abc", ``},
		{"GET", "/v1/tasks?limit=0", ``},
		{"GET", "/v1/tasks?limit=-1", ``},
		{"GET", "/v1/tasks?state=BOGUS", ``},
		{"GET", "/v1/tasks?after=bad!", ``},
		{"GET", "/v1/nope", ``},
		{"POST", "/v1/status/leader", ``},
		{"DELETE", "/v1/operator/raft/peer", ``},
		{"DELETE", "/v1/operator/raft/peer?id=bad!", ``},
		{"DELETE", "/v1/operator/raft/peer?id=ghost", ``},
		{"POST", "/v1/operator/raft/join", `{"id":1}`},
		{"POST", "/v1/operator/raft/join", `{"id":"x"}`},
		{"PUT", "/v1/operator/raft/transfer-leadership?id=bad!", ``},
		{"PUT", "/v1/operator/raft/transfer-leadership?id=ghost", ``},
		{"PUT", "/v1/operator/snapshot", `not a snapshot`},
		{"POST", "/v1/operator/snapshot", ``},
		{"POST", "/v1/nodes/register", `{"id":"bad id!"}`},
		{"POST", "/v1/nodes/register", `{"id":"n1","resources":{"cpu_millis":-1}}`},
		{"POST", "/v1/nodes/register", `{"id":"n1","slots":"four"}`},
		{"POST", "/v1/nodes/register", `{"id":"n1","capabilities":{"exec":[]}}`},
		{"POST", "/v1/nodes/register", `{"id":"n1","weight":-3}`},
		{"POST", "/v1/nodes/register", `{"id":"n1","flavour":"x"}`},
		{"GET", "/v1/nodes/ghost", ``},
		{"GET", "/v1/nodes/bad!", ``},
		{"POST", "/v1/nodes/ghost/drain", `{"enable":true}`},
		{"POST", "/v1/nodes/ghost/drain", `{"enable":"yes"}`},
		{"POST", "/v1/nodes/ghost/eligibility", `{"eligible":true,"x":1}`},
		{"POST", "/v1/nodes/ghost/eligibility", `{"eligible":true}`},
		{"POST", "/v1/nodes/ghost/heartbeat", `{"session_generation":1}`},
		{"POST", "/v1/nodes/ghost/heartbeat", `{"session_generation":-1}`},
		{"PUT", "/v1/nodes/ghost/drain", `{}`},
		{"GET", "/v1/tasks/ghost/explain", ``},
		{"GET", "/v1/tasks/bad!/explain", ``},
		{"POST", "/v1/explain", `{"resources":{"gpu":-1}}`},
		{"POST", "/v1/explain", `{"heartbeat_ttl_seconds":0}`},
		{"POST", "/v1/explain", `{"heartbeat_ttl_seconds":"soon"}`},
		{"POST", "/v1/explain", `[`},
	}
}

// Test 7: bad input to every endpoint on every replica gets a JSON 4xx,
// and the replicas stay up and keep their state.
func TestBadInputGetsJSON4xx(t *testing.T) {
	c := NewCluster(t, 3)
	hc := &http.Client{Timeout: 30 * time.Second}
	for i, r := range c.Replicas {
		for _, br := range badRequests() {
			req, err := http.NewRequest(br.method, "http://"+r.Cfg.HTTPAddr+br.path, bytes.NewReader([]byte(br.body)))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("replica %d: %s %s: %v", i, br.method, br.path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e struct {
				Error string `json:"error"`
			}
			short := br.body
			if len(short) > 60 {
				short = short[:60] + "…"
			}
			if resp.StatusCode < 400 || resp.StatusCode >= 500 {
				t.Errorf("replica %d: %s %s %q: want 4xx, got %d %s", i, br.method, br.path, short, resp.StatusCode, body)
				continue
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("replica %d: %s %s: content type %q", i, br.method, br.path, ct)
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
				t.Errorf("replica %d: %s %s: body is not a JSON error: %s", i, br.method, br.path, body)
			}
		}
	}
	// Still up, still one cluster, and nothing was created by the bad requests.
	c.WaitForLeader()
	list, _, err := c.AllClient().ListTasks(Ctx(t, 10*time.Second), api.TaskQuery{Limit: api.MaxListLimit}, api.ReadOptions{Consistent: true})
	if err != nil || len(list.Tasks) != 0 {
		t.Fatalf("bad requests must not create tasks: %d (%v)", len(list.Tasks), err)
	}
}
