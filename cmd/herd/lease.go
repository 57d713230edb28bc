package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"herd/api"
)

func runLease(e *env, args []string) error {
	return subcommands(e, "lease", args, []command{
		{"check", "from inside a task: is this attempt still the current one? (exit 0 yes, 1 no, 3 cannot tell)", runLeaseCheck},
	})
}

// exitWith ends the command with a given exit code and message.
type exitWith struct {
	code int
	msg  string
}

func (x *exitWith) Error() string { return x.msg }

// runLeaseCheck asks the node's agent whether the attempt the task runs
// as is still current, before the task writes anything outside herd.
func runLeaseCheck(e *env, args []string) error {
	fs := newFlags(e, "lease check", "", "Ask this node's agent whether the attempt is still the current one (a fencing token check).\n"+
		"Exit 0: current; 1: not current (stop, write nothing); 3: the agent cannot tell (treat as not current).\n"+
		"Defaults come from the task's environment.")
	get := func(k string) string { v, _ := e.getenv(k); return v }
	addr := fs.String("addr", get("HERD_AGENT_ADDR"), "the agent's address (unix:PATH)")
	attempt := fs.String("attempt", get("HERD_ATTEMPT_ID"), "attempt id")
	lease := fs.String("lease", get("HERD_LEASE"), "lease version")
	quiet := fs.Bool("q", false, "print nothing; the exit code says")
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if len(fs.Args()) != 0 {
		return usagef("lease check takes no arguments")
	}
	path, ok := strings.CutPrefix(*addr, "unix:")
	if !ok || path == "" {
		return usagef("lease check needs -addr unix:PATH (HERD_AGENT_ADDR, set for tasks), got %q", *addr)
	}
	if *attempt == "" || *lease == "" {
		return usagef("lease check needs -attempt and -lease (HERD_ATTEMPT_ID and HERD_LEASE, set for tasks)")
	}
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
	q := url.Values{"attempt": {*attempt}, "lease": {*lease}}
	resp, err := hc.Get("http://agent/v1/lease?" + q.Encode())
	if err != nil {
		return &exitWith{code: 3, msg: fmt.Sprintf("cannot tell: the agent does not answer: %v", err)}
	}
	defer resp.Body.Close()
	var answer api.LeaseCheck
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return &exitWith{code: 3, msg: fmt.Sprintf("cannot tell: the agent's answer (%s) is unreadable: %v", resp.Status, err)}
	}
	say := func(s string) {
		if !*quiet {
			fmt.Fprintln(e.stdout, s)
		}
	}
	switch {
	case resp.StatusCode == http.StatusOK && answer.Current:
		say(fmt.Sprintf("current: attempt %s, lease %s", *attempt, *lease))
		return nil
	case resp.StatusCode == http.StatusConflict:
		return &exitWith{code: 1, msg: "not current: " + answer.Reason}
	case resp.StatusCode == http.StatusBadRequest:
		return usagef("lease check: %s", answer.Reason)
	default:
		return &exitWith{code: 3, msg: "cannot tell: " + answer.Reason}
	}
}
