package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"herd/api"
)

// check-state reports what each server answers: a server with a broken
// state and one that cannot be reached each make it exit 1, and every
// violation is printed under its server's name.
func TestCheckStateReportsViolationsAndUnreachableServers(t *testing.T) {
	var broken, sound *httptest.Server
	answer := func(check api.StateCheck) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/v1/operator/raft/configuration":
				_ = json.NewEncoder(w).Encode(api.RaftConfiguration{Index: 3, Servers: []api.RaftServer{
					{ID: "s1", HTTPAddress: strings.TrimPrefix(sound.URL, "http://"), Voter: true, Leader: true},
					{ID: "s2", HTTPAddress: strings.TrimPrefix(broken.URL, "http://"), Voter: true},
					{ID: "s3", HTTPAddress: "127.0.0.1:1", Voter: true},
				}})
			case "/v1/operator/debug/check-state":
				_ = json.NewEncoder(w).Encode(check)
			default:
				http.NotFound(w, r)
			}
		}
	}
	sound = httptest.NewServer(answer(api.StateCheck{Server: "s1", Index: 40, Tasks: 5, Attempts: 4, Nodes: 2, OK: true}))
	defer sound.Close()
	broken = httptest.NewServer(answer(api.StateCheck{Server: "s2", Index: 40, Tasks: 5, Attempts: 4, Nodes: 2,
		Violations: []string{"node n1: books say 2 live attempts, live attempts hold 1"}}))
	defer broken.Close()

	e, out, errb := testEnv(map[string]string{"HERD_ADDR": sound.URL})
	code := run(e, []string{"operator", "debug", "check-state"})
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errb)
	}
	for _, want := range []string{"s1", " ok", "1 violations", "s2: node n1: books say 2 live attempts", "s3", "not asked"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errb.String(), "2 of 3 servers could not be checked or hold a broken state") {
		t.Fatalf("stderr: %s", errb)
	}
}
