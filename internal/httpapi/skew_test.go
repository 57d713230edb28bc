package httpapi

import (
	"testing"

	"herd/api"
)

// During a rolling upgrade a newer build may send fields this build does
// not know. A server's or agent's record of itself is read without them;
// what a client asked for is refused with a retryable 503 that names the
// field; the same field from a build no newer than this one is a 400,
// the client's mistake.
func TestUnknownFieldsFromANewerBuild(t *testing.T) {
	newer := map[string]string{api.HeaderVersion: "99.0.0"}
	forwardedByNewer := map[string]string{api.HeaderForwarded: "s2", api.HeaderForwardedVersion: "99.0.0"}
	older := map[string]string{api.HeaderVersion: "0.0.1"}
	spec := `{"name":"n","command":["true"],"gpu_model":"a100"}`
	for _, c := range []handlerCase{
		{name: "submit from a newer client", method: "POST", target: "/v1/tasks", body: spec, header: newer,
			status: 503, code: api.CodeNotApplied, contains: `does not support field \"gpu_model\" yet, which a newer build (99.0.0) sent: retry after the upgrade`},
		{name: "submit forwarded by a newer replica", method: "POST", target: "/v1/tasks", body: spec, header: forwardedByNewer,
			status: 503, code: api.CodeNotApplied, contains: `field \"gpu_model\"`},
		{name: "submit from an older client", method: "POST", target: "/v1/tasks", body: spec, header: older, status: 400, contains: `unknown field \"gpu_model\"`},
		{name: "submit with no version", method: "POST", target: "/v1/tasks", body: spec, status: 400, contains: `unknown field \"gpu_model\"`},
		{name: "heartbeat from a newer agent", method: "POST", target: "/v1/nodes/n1/heartbeat", body: `{"battery_pct":40}`, header: newer,
			status: 200, call: "Heartbeat n1"},
		{name: "heartbeat from an agent of this build", method: "POST", target: "/v1/nodes/n1/heartbeat", body: `{"battery_pct":40}`, status: 400},
		{name: "address record from a newer server", method: "POST", target: "/v1/operator/raft/join",
			body: `{"id":"s4","raft_address":"h:1","http_address":"h:2","update_only":true,"zone":"b"}`, header: newer,
			status: 200, contains: `"joined":"s4"`, call: "Join s4"},
		{name: "a newer build's malformed record is still refused", method: "POST", target: "/v1/operator/raft/join",
			body: `{"id":"s4","raft_address":7,"zone":"b"}`, header: newer, status: 400},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t) })
	}
}
