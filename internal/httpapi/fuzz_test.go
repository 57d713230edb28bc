package httpapi

import (
	"bytes"
	"herd/api"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzDecodeBody: every request decoder either accepts the body or
// answers a JSON 4xx; it never panics.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{
		`{"command":["true"],"priority":50}`, `{`, `[]`, `{"command":"x"}`, `{"x":1}`, `{"command":["a"]} {}`,
		`{"id":"n1","resources":{"cpu_millis":1000},"slots":2}`, `{"lease_version":3,"exit_code":0}`,
		"{\"name\":\"\xff\"}", `{"heartbeat_ttl_seconds":120,"resources":{"gpu":1}}`, `{"priority":1e999}`,
	} {
		f.Add([]byte(s))
	}
	targets := []func() any{
		func() any { return &api.TaskSpec{} },
		func() any { return &api.NodeRegistration{} },
		func() any { return &api.ExplainRequest{} },
		func() any { return &api.AttemptCompleteRequest{} },
		func() any { return &api.JoinRequest{} },
		func() any { return &api.DrainRequest{} },
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, mk := range targets {
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
			err := decodeBody(w, r, mk())
			if err == nil {
				continue
			}
			writeErr(w, err)
			if w.Code < 400 || w.Code >= 500 || w.Header().Get("Content-Type") != "application/json" || !bytes.Contains(w.Body.Bytes(), []byte(`"error"`)) {
				t.Fatalf("body %q: answer %d %q", body, w.Code, w.Body.String())
			}
		}
	})
}
