package main

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The mistakes a user makes reaching a cluster each end with what to do
// next, against real servers that answer as a misconfigured or forming
// cluster does: the wrong scheme either way, a CA not given, no leader
// yet, a token missing or not allowed.
func TestReachingAClusterWrongSaysWhatToDo(t *testing.T) {
	answer := func(code int, msg string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_, _ = w.Write([]byte(`{"error":"` + msg + `"}`))
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	plain := answer(http.StatusOK, "")
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"tasks":[]}`))
	}))
	t.Cleanup(tlsSrv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	hostport := func(s *httptest.Server) string {
		return strings.TrimPrefix(strings.TrimPrefix(s.URL, "http://"), "https://")
	}

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"plain HTTP to an HTTPS server", []string{"-address", "http://" + hostport(tlsSrv)}, []string{"speaks HTTPS", "https://", "-ca-file"}},
		{"HTTPS without the cluster's CA", []string{"-address", "https://" + hostport(tlsSrv)}, []string{"herd: next: trust the cluster's CA", "-ca-file or HERD_CACERT"}},
		{"HTTPS to a plain server", []string{"-address", "https://" + hostport(plain), "-ca-file", ca}, []string{"herd: next: that server speaks plain HTTP"}},
		{"no leader yet", []string{"-address", hostport(answer(http.StatusServiceUnavailable, "no cluster leader"))}, []string{"herd: next: the cluster has no leader yet", "retry"}},
		{"no token", []string{"-address", hostport(answer(http.StatusUnauthorized, "this request needs a token"))}, []string{"herd: next: give an ACL token with -token or HERD_TOKEN"}},
		{"a token without the capability", []string{"-address", hostport(answer(http.StatusForbidden, "token may not read"))}, []string{"herd: next: the token's policy does not allow this"}},
		{"nothing listening", []string{"-address", "127.0.0.1:1"}, []string{"herd: next: nothing answers at that address", "herd dev"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, out, errb := testEnv(nil)
			code := run(e, append([]string{"task", "list"}, tc.args...))
			if code != 1 || out.Len() != 0 {
				t.Errorf("exit %d, stdout %q: want exit 1 and nothing on stdout", code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, errb)
				}
			}
		})
	}
	// The right address and CA work, so the cases above fail for their
	// mistake alone.
	e, out, errb := testEnv(nil)
	if code := run(e, []string{"task", "list", "-address", "https://" + hostport(tlsSrv), "-ca-file", ca}); code != 0 {
		t.Fatalf("the right CA: exit %d\n%s%s", code, out, errb)
	}
}
