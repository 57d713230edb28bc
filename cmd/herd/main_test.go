package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"herd/internal/version"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"herd/api"
	"herd/config"
	"herd/test"
)

// cliAt runs the CLI against the cluster at addr (HERD_ADDR), answering
// its standard output, standard error and exit code.
func cliAt(addr string) func(args ...string) (string, string, int) {
	vars := map[string]string{"HERD_ADDR": addr}
	return func(args ...string) (string, string, int) {
		e, out, errb := testEnv(vars)
		code := run(e, args)
		return out.String(), errb.String(), code
	}
}

func testEnv(vars map[string]string) (*env, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return &env{
		stdin: strings.NewReader(""), stdout: &out, stderr: &errb,
		getenv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok },
	}, &out, &errb
}

func TestCLIAgainstACluster(t *testing.T) {
	c := test.NewCluster(t, 3)
	vars := map[string]string{"HERD_ADDR": c.Replicas[c.Follower()].Cfg.HTTPAddr}
	herd := cliAt(vars["HERD_ADDR"])

	out, errOut, code := herd("task", "submit", "-json", "-name", "thumb", "-priority", "70", "-label", "zone=a", "-env", "K=V", "-cpu", "500", "--", "sh", "-c", "echo hi")
	if code != 0 {
		t.Fatalf("submit exit %d: %s", code, errOut)
	}
	var sub api.SubmitResponse
	if err := json.Unmarshal([]byte(out), &sub); err != nil || sub.ID == "" {
		t.Fatalf("submit -json printed %q (%v)", out, err)
	}
	out, _, code = herd("task", "list")
	if code != 0 || !strings.Contains(out, sub.ID) || !strings.Contains(out, "PENDING") {
		t.Fatalf("task list (exit %d) does not show the task:\n%s", code, out)
	}
	out, _, code = herd("task", "status", sub.ID)
	for _, want := range []string{sub.ID, "thumb", `sh -c "echo hi"`, "70", "cpu 500m", "queued"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("task status (exit %d) lacks %q:\n%s", code, want, out)
		}
	}
	if out, errOut, code = herd("node", "register", "-cpu-millis", "4000", "-labels", "zone=a,disk=ssd", "-capabilities", "exec@1,gpu-infer@2", "edge-1"); code != 0 || !strings.Contains(out, "session 1") {
		t.Fatalf("node register exit %d: %s %s", code, out, errOut)
	}
	if out, _, code = herd("node", "list"); code != 0 || !strings.Contains(out, "edge-1") || !strings.Contains(out, "ACTIVE") {
		t.Fatalf("node list exit %d:\n%s", code, out)
	}
	if out, _, code = herd("explain", "-cpu", "32000", "-prefer", "disk=ssd"); code != 0 || !strings.Contains(out, "0/1 nodes eligible: 1 CPU below minimum") || !strings.Contains(out, "CPU below minimum (4000 < 32000 millis)") {
		t.Fatalf("explain what-if exit %d:\n%s", code, out)
	}
	// The submitted task (500m, zone=a) gets placed on edge-1.
	if !test.Eventually(20*time.Second, func() bool {
		out, _, code = herd("task", "status", sub.ID)
		return code == 0 && strings.Contains(out, "SCHEDULED") && strings.Contains(out, "edge-1")
	}) {
		t.Fatalf("task was not placed on edge-1:\n%s", out)
	}
	if out, _, code = herd("node", "status", "edge-1"); code != 0 || !strings.Contains(out, "cpu 500m") || !strings.Contains(out, "RESERVED") {
		t.Fatalf("node status exit %d:\n%s", code, out)
	}
	if out, _, code = herd("explain", sub.ID); code != 0 || !strings.Contains(out, "edge-1") {
		t.Fatalf("explain task exit %d:\n%s", code, out)
	}
	// Tiers: edge-1 (4 cores, 1 GiB) is L3 by its memory; a pin holds, auto
	// lets go; a bad tier is a usage error.
	if out, _, code = herd("node", "list"); code != 0 || !strings.Contains(out, "TIER") || !strings.Contains(out, "L3") {
		t.Fatalf("node list shows no tier (exit %d):\n%s", code, out)
	}
	if out, _, code = herd("node", "tier", "edge-1", "L1"); code != 0 || !strings.Contains(out, "tier L1 (pinned)") {
		t.Fatalf("node tier exit %d:\n%s", code, out)
	}
	if out, _, code = herd("explain", "-size", "large"); code != 0 || !strings.Contains(out, "1/1 nodes eligible") || !strings.Contains(out, "L1") {
		t.Fatalf("explain of a large task on the pinned node exit %d:\n%s", code, out)
	}
	if out, _, code = herd("node", "tier", "edge-1", "auto"); code != 0 || !strings.Contains(out, "tier L3") {
		t.Fatalf("node tier auto exit %d:\n%s", code, out)
	}
	if out, _, code = herd("explain", "-size", "large"); code != 0 || !strings.Contains(out, "0/1 nodes eligible: 1 tier L3 below size large") {
		t.Fatalf("explain of a large task on an L3 node exit %d:\n%s", code, out)
	}
	if _, errOut, code = herd("node", "tier", "edge-1", "L9"); code != 2 || !strings.Contains(errOut, "not L1, L2, L3 or auto") {
		t.Fatalf("node tier L9: exit %d, %s", code, errOut)
	}
	if _, errOut, code = herd("explain", "-size", "huge"); code == 0 || !strings.Contains(errOut, "size") {
		t.Fatalf("explain -size huge: exit %d, %s", code, errOut)
	}
	if out, _, code = herd("node", "rebench", "edge-1"); code != 0 || !strings.Contains(out, "measure itself again") {
		t.Fatalf("node rebench exit %d:\n%s", code, out)
	}
	if out, _, code = herd("node", "check", "edge-1"); code != 0 || !strings.Contains(out, "health check 1") {
		t.Fatalf("node check exit %d:\n%s", code, out)
	}
	if out, _, code = herd("node", "status", "edge-1"); code != 0 || !strings.Contains(out, "Health check") || !strings.Contains(out, "asked by an operator") || !strings.Contains(out, "Tier") {
		t.Fatalf("node status exit %d:\n%s", code, out)
	}
	if out, _, code = herd("node", "drain", "edge-1"); code != 0 || !strings.Contains(out, "DRAINING") {
		t.Fatalf("node drain exit %d:\n%s", code, out)
	}
	out, _, code = herd("task", "submit", "-label", "zone=a", "--", "true")
	if code != 0 {
		t.Fatalf("submit: %s", out)
	}
	waiting := strings.Fields(out)[2][:26]
	if !test.Eventually(20*time.Second, func() bool {
		out, _, code = herd("task", "status", strings.TrimSuffix(waiting, ","))
		return code == 0 && strings.Contains(out, "Waiting: 0/1 nodes eligible: 1 not active")
	}) {
		t.Fatalf("a waiting task's status should say why:\n%s", out)
	}
	// The leader's scheduler: one placement so far, and one task waiting
	// once a pass has seen it (the queue is as of the last pass).
	if !test.Eventually(20*time.Second, func() bool {
		out, _, code = herd("operator", "scheduler")
		return code == 0 && regexp.MustCompile(`(?m)^placements +1$`).MatchString(out) && regexp.MustCompile(`(?m)^queue depth +1$`).MatchString(out)
	}) {
		t.Fatalf("operator scheduler (exit %d):\n%s", code, out)
	}
	out, _, code = herd("operator", "scheduler", "-json")
	var sched api.SchedulerStatus
	if err := json.Unmarshal([]byte(out), &sched); code != 0 || err != nil || sched.ID != c.Replicas[c.WaitForLeader()].Cfg.ID || sched.Passes == 0 || sched.Placements != 1 {
		t.Fatalf("operator scheduler -json (exit %d, %v): %s", code, err, out)
	}
	// Every server's build, once each has recorded it.
	if !test.Eventually(20*time.Second, func() bool {
		out, _, code = herd("operator", "raft", "list-peers")
		return code == 0 && strings.Count(out, "true") >= 4 && strings.Contains(out, "VERSION") && strings.Count(out, " "+version.Version()+" ") == 3
	}) {
		t.Fatalf("list-peers (exit %d):\n%s", code, out)
	}
	out, _, code = herd("version")
	if code != 0 || !strings.HasPrefix(out, "herd "+version.Version()) || !strings.Contains(out, runtime.Version()) {
		t.Fatalf("version (exit %d): %q", code, out)
	}
	out, _, code = herd("version", "-json")
	var info version.Info
	if err := json.Unmarshal([]byte(out), &info); code != 0 || err != nil || info.Version != version.Version() || info.GoVersion != runtime.Version() {
		t.Fatalf("version -json (exit %d, %v): %s", code, err, out)
	}
	// Every replica checks its own state: three answers, all sound.
	// A server is asked once its HTTP address is recorded.
	if !test.Eventually(20*time.Second, func() bool {
		out, errOut, code = herd("operator", "debug", "check-state")
		return code == 0 && strings.Count(out, " ok") == 3
	}) {
		t.Fatalf("check-state (exit %d): %s\n%s", code, errOut, out)
	}
	// Followers answer from what they applied: once all three have
	// applied everything, each reports the same sound state.
	var checks []api.StateCheck
	if !test.Eventually(20*time.Second, func() bool {
		out, _, code = herd("operator", "debug", "check-state", "-json")
		checks = nil
		if err := json.Unmarshal([]byte(out), &checks); code != 0 || err != nil || len(checks) != 3 {
			return false
		}
		for _, ch := range checks {
			if ch.Tasks != 2 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("check-state -json (exit %d): %s", code, out)
	}
	for _, ch := range checks {
		if !ch.OK || ch.Index == 0 || ch.Nodes != 1 || ch.Attempts != 1 {
			t.Fatalf("check of %s: %+v, want a sound state of 2 tasks, 1 attempt, 1 node", ch.Server, ch)
		}
	}
	snap := filepath.Join(t.TempDir(), "state.snap")
	if _, errOut, code = herd("operator", "snapshot", "save", snap); code != 0 {
		t.Fatalf("snapshot save exit %d: %s", code, errOut)
	}
	if st, err := os.Stat(snap); err != nil || st.Size() == 0 {
		t.Fatalf("snapshot file: %v", err)
	}
	if _, errOut, code = herd("operator", "snapshot", "restore", snap); code != 0 {
		t.Fatalf("snapshot restore exit %d: %s", code, errOut)
	}
	if out, errOut, code = herd("operator", "raft", "transfer-leadership"); code != 0 || !strings.Contains(out, "leader is now") {
		t.Fatalf("transfer-leadership exit %d: %s %s", code, out, errOut)
	}

	// A file of specs goes in batches; keys make a re-run create nothing.
	specs := filepath.Join(t.TempDir(), "tasks.jsonl")
	if err := os.WriteFile(specs, []byte(`{"idempotency_key":"batch-a","command":["true"]}
{"idempotency_key":"batch-b","command":["sh","-c","exit 0"],"priority":20}
{"idempotency_key":"batch-a","command":["true"]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code = herd("task", "submit", "-f", specs); code != 0 || !strings.Contains(out, "Submitted 2 tasks (1 already existed") {
		t.Fatalf("submit -f exit %d: %s %s", code, out, errOut)
	}
	if out, errOut, code = herd("task", "submit", "-f", specs); code != 0 || !strings.Contains(out, "Submitted 0 tasks (3 already existed") {
		t.Fatalf("submit -f again exit %d: %s %s", code, out, errOut)
	}
	badSpecs := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(badSpecs, []byte("{\"command\":[\"true\"]}\n{\"command\":[\"true\"],\"colour\":\"red\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// Flags stand before or after the arguments, as -flag or --flag; "--"
	// ends them; task submit's command keeps its own flags.
	for _, args := range [][]string{
		{"task", "status", sub.ID, "-json"}, {"task", "status", "--json", sub.ID}, {"task", "status", sub.ID, "--json=true"},
		{"node", "status", "edge-1", "-json"}, {"node", "status", "-json", "edge-1"},
	} {
		out, errOut, code := herd(args...)
		var v struct{ ID string }
		if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || (v.ID != sub.ID && v.ID != "edge-1") {
			t.Errorf("herd %s: exit %d, %v, stdout %q, stderr %q: want the JSON of one record", strings.Join(args, " "), code, err, out, errOut)
		}
	}
	if out, errOut, code = herd("task", "submit", "-json", "-name", "own-flags", "sh", "-c", "exit 0", "-json"); code != 0 {
		t.Fatalf("task submit with the command's own flags: exit %d, %s", code, errOut)
	}
	var own api.SubmitResponse
	if err := json.Unmarshal([]byte(out), &own); err != nil {
		t.Fatalf("submit -json printed %q (%v)", out, err)
	}
	out, _, code = herd("task", "status", own.ID, "-json")
	var ownTask api.Task
	if err := json.Unmarshal([]byte(out), &ownTask); code != 0 || err != nil || strings.Join(ownTask.Spec.Command, " ") != "sh -c exit 0 -json" {
		t.Fatalf("the command after task submit's first argument must be kept whole (exit %d, %v):\n%s", code, err, out)
	}
	if _, errOut, code = herd("task", "status", sub.ID, "-colour"); code != 2 || !strings.Contains(errOut, "flag provided but not defined: -colour") || !strings.Contains(errOut, "see 'herd task status -h'") {
		t.Errorf("an unknown flag after the argument: exit %d, %q", code, errOut)
	}
	if out, errOut, code = herd("task", "status", "--", "-json"); code == 0 || out != "" || !strings.Contains(errOut, "-json") {
		t.Errorf("after --, -json is an argument: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// The lists' column names are a contract scripts rely on.
	for args, header := range map[string]string{
		"task list": "ID NAME STATE PRIORITY SUBMITTER SUBMITTED",
		"node list": "ID VERSION MANAGEMENT LIVENESS SCHEDULING TIER HEALTH ATTEMPTS CPU FREE MEM FREE GPU FREE INTERVAL MISSED LOSS ASLEEP",
		"job list":  "ID NAME STATE SUBMITTED STAGES",
	} {
		out, _, code := herd(strings.Fields(args)...)
		first, _, _ := strings.Cut(out, "\n")
		if code != 0 || strings.Join(strings.Fields(first), " ") != header {
			t.Errorf("herd %s: exit %d, header %q, want %q", args, code, first, header)
		}
	}

	// -o: json, yaml, name, wide and a template, on lists and records.
	if out, errOut, code = herd("task", "list", "-o", "name"); code != 0 || !slices.Contains(strings.Fields(out), sub.ID) || strings.Contains(out, "STATE") {
		t.Errorf("task list -o name: exit %d, %q %s", code, out, errOut)
	}
	if out, _, code = herd("node", "list", "-o", "name"); code != 0 || out != "edge-1\n" {
		t.Errorf("node list -o name: exit %d, %q", code, out)
	}
	if out, _, code = herd("task", "status", sub.ID, "-o", "yaml"); code != 0 || !strings.Contains(out, "\nid: "+sub.ID+"\n") || !strings.Contains(out, "\nstate: ") {
		t.Errorf("task status -o yaml: exit %d\n%s", code, out)
	}
	if out, _, code = herd("task", "status", sub.ID, "-o", "template={{.id}} {{.spec.priority}}"); code != 0 || out != sub.ID+" 70\n" {
		t.Errorf("task status -o template: exit %d, %q", code, out)
	}
	if out, _, code = herd("task", "list", "-o", "wide"); code != 0 || !strings.Contains(out, "CURRENT ATTEMPT") || !strings.Contains(out, "exec@1") {
		t.Errorf("task list -o wide: exit %d\n%s", code, out)
	}
	if out, _, code = herd("node", "list", "-o", "wide"); code != 0 || !strings.Contains(out, "CAPABILITIES") || !strings.Contains(out, "gpu-infer@2") {
		t.Errorf("node list -o wide: exit %d\n%s", code, out)
	}
	if _, errOut, code = herd("task", "list", "-o", "xml"); code != 2 || !strings.Contains(errOut, "want json, yaml, name, wide or template=TEMPLATE") {
		t.Errorf("task list -o xml: exit %d, %s", code, errOut)
	}
	if _, errOut, code = herd("task", "list", "-o", "template={{.id"); code != 2 || !strings.Contains(errOut, "-o template={{.id") {
		t.Errorf("a broken template: exit %d, %s", code, errOut)
	}

	// -watch prints the list again when it changes, until interrupted.
	watchOut, stopWatch := &lockedBuffer{}, make(chan os.Signal, 1)
	we := &env{stdin: strings.NewReader(""), stdout: watchOut, stderr: &lockedBuffer{},
		getenv:  func(k string) (string, bool) { v, ok := vars[k]; return v, ok },
		signals: func() (<-chan os.Signal, func()) { return stopWatch, func() {} }}
	watched := make(chan int, 1)
	go func() { watched <- run(we, []string{"task", "list", "-watch"}) }()
	if !test.Eventually(20*time.Second, func() bool { return strings.Contains(watchOut.String(), sub.ID) }) {
		t.Fatalf("task list -watch printed no list:\n%s", watchOut.String())
	}
	out, errOut, code = herd("task", "submit", "-o", "name", "-name", "watched", "--", "true")
	if code != 0 {
		t.Fatalf("submit: %d %s", code, errOut)
	}
	newID := strings.TrimSpace(out)
	if !test.Eventually(20*time.Second, func() bool {
		o := watchOut.String()
		return strings.Contains(o, newID) && strings.Contains(o, "--- ")
	}) {
		t.Fatalf("task list -watch did not print the new task %s:\n%s", newID, watchOut.String())
	}
	stopWatch <- os.Interrupt
	if code := <-watched; code != 0 {
		t.Fatalf("task list -watch exited %d", code)
	}

	typoJob := filepath.Join(t.TempDir(), "typo.json")
	notAJob := filepath.Join(t.TempDir(), "notes.txt")
	typoSpecs := filepath.Join(t.TempDir(), "typo.jsonl")
	for path, body := range map[string]string{typoJob: `{"name":"p","stagez":[]}`, notAJob: "hello\n", typoSpecs: `{"comand":["true"]}`} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// Mistakes: clear message (what to do next where herd can say),
	// non-zero exit, nothing printed on stdout.
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"task", "status", "missing-task"}, 1, "not found"},
		{[]string{"task", "list", "-address", "127.0.0.1:1"}, 1, "herd: next: nothing answers at that address"},
		{[]string{"job", "run", typoJob}, 2, `unknown field "stagez" (did you mean "stages"?)`},
		{[]string{"job", "run", notAJob}, 2, "a job file is HCL"},
		{[]string{"task", "submit", "-f", typoSpecs}, 2, `unknown field "comand" (did you mean "command"?)`},
		{[]string{"task", "list", "-o", "csv"}, 2, "want json, yaml, name, wide or template="},
		{[]string{"task", "status", sub.ID, "-colour"}, 2, "flag provided but not defined: -colour (see 'herd task status -h')"},
		{[]string{"task", "status"}, 2, "exactly one task id"},
		{[]string{"task", "submit"}, 2, "needs a command"},
		{[]string{"task", "submit", "-priority", "500", "--", "true"}, 1, "priority: 500"},
		{[]string{"task", "submit", "-capability", "gpu", "--", "true"}, 2, "name@version"},
		{[]string{"task", "submit", "-label", "novalue", "--", "true"}, 2, "key=value"},
		{[]string{"task", "frobnicate"}, 2, "unknown task subcommand"},
		{[]string{"task", "submit", "-f", badSpecs}, 2, "task spec 2"},
		{[]string{"task", "submit", "-f", badSpecs, "--", "true"}, 2, "not both"},
		{[]string{"task", "submit", "-f", "/nonexistent/tasks.jsonl"}, 1, "no such file"},
		{[]string{"operator", "raft", "remove-peer", "ghost"}, 1, "not in the raft configuration"},
		{[]string{"operator", "snapshot", "restore", "/nonexistent/file"}, 1, "no such file"},
		{[]string{"nonsense"}, 2, "unknown command"},
		{[]string{"task", "list", "-address", "::bad::"}, 2, "invalid server address"},
		{[]string{"node", "status", "ghost"}, 1, "not found"},
		{[]string{"node", "eligibility", "edge-1", "maybe"}, 2, "not true or false"},
		{[]string{"node", "register", "-capabilities", "exec", "n9"}, 2, "name@version"},
		{[]string{"explain", "ghost"}, 1, "not found"},
		{[]string{"task", "cancel", "ghost"}, 1, "not found"},
		{[]string{"agent", "-servers", "127.0.0.1:1"}, 1, "id: \"\" must be"},
		{[]string{"agent", "-id", "a1", "-data-dir", "/tmp/x", "-limits", "magic"}, 1, "limits \"magic\""},
		{[]string{"agent", "-id", "a1", "-procs", "-2"}, 2, "is not a count of threads"},
	} {
		out, errOut, code := herd(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.msg) {
			t.Errorf("herd %s: exit %d (want %d), stderr %q (want %q), stdout %q", strings.Join(tc.args, " "), code, tc.code, errOut, tc.msg, out)
		}
	}
}

func TestEveryCommandHasHelp(t *testing.T) {
	for _, args := range [][]string{
		{"-h"}, {"server", "-h"}, {"dev", "-h"}, {"task", "-h"}, {"task", "submit", "-h"}, {"task", "status", "-h"},
		{"task", "list", "-h"}, {"operator", "-h"}, {"operator", "raft", "-h"}, {"operator", "raft", "list-peers", "-h"},
		{"operator", "raft", "remove-peer", "-h"}, {"operator", "raft", "transfer-leadership", "-h"},
		{"operator", "scheduler", "-h"}, {"operator", "snapshot", "-h"}, {"operator", "snapshot", "save", "-h"}, {"operator", "snapshot", "restore", "-h"},
		{"node", "-h"}, {"node", "list", "-h"}, {"node", "status", "-h"}, {"node", "drain", "-h"}, {"node", "eligibility", "-h"},
		{"node", "register", "-h"}, {"node", "tier", "-h"}, {"node", "rebench", "-h"}, {"node", "check", "-h"},
		{"task", "logs", "-h"}, {"job", "-h"}, {"job", "run", "-h"}, {"job", "status", "-h"}, {"job", "list", "-h"}, {"job", "cancel", "-h"}, {"explain", "-h"}, {"task", "cancel", "-h"}, {"agent", "-h"}, {"bench", "-h"},
	} {
		e, out, _ := testEnv(nil)
		if code := run(e, args); code != 0 || !strings.Contains(out.String(), "Usage: herd") {
			t.Errorf("herd %s: exit %d, output %q", strings.Join(args, " "), code, out.String())
		}
	}
}

func TestServerConfigPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "server.hcl")
	err := os.WriteFile(file, []byte(`
id        = "from-file"
data_dir  = "/var/lib/herd"
http_addr = "127.0.0.1:5000"
raft_addr = "127.0.0.1:5001"
bootstrap_expect = 3
join = ["10.0.0.1:4646", "10.0.0.2:4646"]
raft {
  heartbeat_timeout = "2s"
  snapshot_threshold = 100
}
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	e, _, _ := testEnv(map[string]string{"HERD_ID": "from-env", "HERD_HTTP_ADDR": "127.0.0.1:6000"})
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	configFile := fs.String("config", "", "")
	applyFlags := config.ServerSettings.BindFlags(fs)
	if err := fs.Parse([]string{"-config", file, "-http-addr", "127.0.0.1:7000"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadServerConfig(e, *configFile, applyFlags)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ID != "from-env" || cfg.HTTPAddr != "127.0.0.1:7000" || cfg.RaftAddr != "127.0.0.1:5001" ||
		cfg.BootstrapExpect != 3 || len(cfg.Join) != 2 || cfg.Raft.HeartbeatTimeout.String() != "2s" ||
		cfg.Raft.SnapshotThreshold != 100 || cfg.HTTPAdvertise != "127.0.0.1:7000" {
		t.Fatalf("precedence file < env < flags not honoured: %+v", cfg)
	}
}

func TestServerRejectsBadConfig(t *testing.T) {
	e, _, errb := testEnv(nil)
	code := run(e, []string{"server", "-id", "bad id!", "-bootstrap", "-bootstrap-expect", "3"})
	msg := errb.String()
	if code != 1 || !strings.Contains(msg, "data_dir is required") || !strings.Contains(msg, "mutually exclusive") || !strings.Contains(msg, `id "bad id!"`) {
		t.Fatalf("exit %d, stderr %q", code, msg)
	}
}

// An agent runs its Go code on one processor unless told otherwise: by
// -procs, or by $GOMAXPROCS when -procs is left at its default.
func TestAgentProcs(t *testing.T) {
	none := func(string) (string, bool) { return "", false }
	withEnv := func(k string) (string, bool) { return "3", k == "GOMAXPROCS" }
	for _, c := range []struct {
		procs  int
		getenv func(string) (string, bool)
		want   int
	}{
		{-1, none, 1},
		{-1, withEnv, 0}, // the runtime already applied $GOMAXPROCS
		{2, none, 2},
		{2, withEnv, 2},
		{0, none, runtime.NumCPU()},
		{0, withEnv, runtime.NumCPU()},
	} {
		if got := agentProcs(c.procs, c.getenv); got != c.want {
			_, env := c.getenv("GOMAXPROCS")
			t.Errorf("agentProcs(%d, GOMAXPROCS set %t) = %d, want %d", c.procs, env, got, c.want)
		}
	}
}

// A server refuses, with what to do and a non-zero exit, a data
// directory a build writing newer command forms has opened: a downgrade
// without the backup from before the upgrade.
func TestServerRefusesADataDirOfNewerForms(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "herd-format.json"), []byte(`{"version":"9.0.0","command_forms":99}`), 0o640); err != nil {
		t.Fatal(err)
	}
	e, _, errb := testEnv(nil)
	code := run(e, []string{"server", "-id", "s1", "-data-dir", dir, "-bootstrap", "-http-addr", "127.0.0.1:0", "-raft-addr", "127.0.0.1:0",
		"-http-advertise", "127.0.0.1:1", "-raft-advertise", "127.0.0.1:2"})
	if msg := errb.String(); code != 1 || !strings.Contains(msg, "written by herd 9.0.0") || !strings.Contains(msg, "run herd 9.0.0 or newer on it, or restore the backup") {
		t.Fatalf("exit %d, stderr %q", code, msg)
	}
}

// splitArgs finds flags and their values wherever they stand.
func TestSplitArgs(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Bool("wait", false, "")
	fs.Int("attempt", 0, "")
	for _, c := range []struct {
		args            []string
		stop            bool
		flags, position string
	}{
		{[]string{"job.hcl", "-wait"}, false, "-wait", "job.hcl"},
		{[]string{"ID", "-attempt", "2"}, false, "-attempt 2", "ID"},
		{[]string{"--attempt=2", "ID", "--wait"}, false, "--attempt=2 --wait", "ID"},
		{[]string{"-", "-wait"}, false, "-wait", "-"},
		{[]string{"-wait", "--", "-attempt", "2"}, false, "-wait", "-attempt 2"},
		{[]string{"-wait", "sh", "-c", "true"}, true, "-wait", "sh -c true"},
		{[]string{"ID", "-unknown", "x"}, false, "-unknown", "ID x"},
	} {
		flags, positional := splitArgs(fs, c.args, c.stop)
		if got := strings.Join(flags, " "); got != c.flags {
			t.Errorf("%q: flags %q, want %q", c.args, got, c.flags)
		}
		if got := strings.Join(positional, " "); got != c.position {
			t.Errorf("%q: arguments %q, want %q", c.args, got, c.position)
		}
	}
}
