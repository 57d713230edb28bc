package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The lease guard is a small watchdog process beside every agent (the herd
// binary re-executed as `herd agent-guard`): it holds the attempts' lease
// when the agent process itself cannot. An agent that is stopped
// (SIGSTOP, a swapped-out board, a debugger), hung, killed or crashed
// runs no code, so its own lease loop cannot stop its attempts; the
// guard, told every renewal of the lease over a pipe, stops them when the
// lease runs out unrenewed, and stops them at once when the pipe closes
// without a goodbye (the agent died). It finds them without being told of
// each one: at the moment it acts it reads /proc for the processes that
// carry this agent's HERD_* variables and reads the agent's own cgroups,
// so an attempt costs the agent nothing on the guard's account. Every
// attempt it stops gets a record in the data directory's fenced/ folder
// saying why, which the agent reads back and reports (LOST, with that
// reason) once it runs again.
//
// The protocol is one line per message on the guard's standard input:
//
//	config {json guardConfig}          first, once
//	state DEADLINE TTL GRACE MARGIN KEEP
//	bye                                 the agent stops on purpose: exit quietly
//
// DEADLINE is when the lease ends on the machine's monotonic clock
// (CLOCK_MONOTONIC, nanoseconds; 0: the cluster gives no lease), so a
// step of the wall clock changes nothing; TTL the lease's length, GRACE
// the SIGTERM-to-SIGKILL grace, MARGIN how late the agent's own lease
// loop may notice (the guard acts no earlier than the agent would), all
// in nanoseconds; KEEP the attempts that opted into on_disconnect =
// "keep_running", comma-separated, or "-".

// guardConfig is what the guard needs to know of its agent.
type guardConfig struct {
	Node    string `json:"node"`
	DataDir string `json:"data_dir"`
	// WorkRoot is where the attempts' working directories are, and
	// AgentAddr the lease socket address in their environment: a process
	// is this agent's when its environment names the node and either the
	// address or its working directory is this agent's (another agent on
	// the machine may carry the same node id).
	WorkRoot  string `json:"work_root"`
	AgentAddr string `json:"agent_addr,omitempty"`
	// AgentGroup is the agent's own process group, never signalled as a
	// whole (a task could join it).
	AgentGroup int `json:"agent_group"`
	// AgentPID is the agent itself, never a target: with cgroup v1 its
	// launching thread sits in an attempt's groups for a moment, so the
	// groups' process lists name the agent then.
	AgentPID int `json:"agent_pid,omitempty"`
	// Cgroups are the directories whose member groups hold this agent's
	// attempts, each with the name prefix of its groups ("" for all).
	Cgroups []guardCgroup `json:"cgroups,omitempty"`
}

type guardCgroup struct {
	Dir    string `json:"dir"`
	Prefix string `json:"prefix,omitempty"`
}

// guardTarget is one process the guard would stop: the attempt it runs
// for and its process group.
type guardTarget struct {
	pid, pgid int
	attempt   string
}

// guardState is what the agent last told the guard of its lease.
type guardState struct {
	deadline int64 // CLOCK_MONOTONIC ns; 0: no lease
	ttl      time.Duration
	grace    time.Duration
	margin   time.Duration
	keep     []string // sorted
}

func (s guardState) line() string {
	keep := "-"
	if len(s.keep) > 0 {
		keep = strings.Join(s.keep, ",")
	}
	return fmt.Sprintf("state %d %d %d %d %s\n", s.deadline, int64(s.ttl), int64(s.grace), int64(s.margin), keep)
}

// parseGuardState reads the fields after "state".
func parseGuardState(fields []string) (guardState, error) {
	if len(fields) != 5 {
		return guardState{}, fmt.Errorf("state: %d fields, want 5", len(fields))
	}
	var n [4]int64
	for i := range n {
		v, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil || v < 0 {
			return guardState{}, fmt.Errorf("state: field %d: %q is not a count of nanoseconds", i+1, fields[i])
		}
		n[i] = v
	}
	s := guardState{deadline: n[0], ttl: time.Duration(n[1]), grace: time.Duration(n[2]), margin: time.Duration(n[3])}
	if fields[4] != "-" {
		s.keep = strings.Split(fields[4], ",")
		slices.Sort(s.keep)
	}
	return s, nil
}

func (c guardConfig) line() (string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	return "config " + string(b) + "\n", nil
}

// fenceDir is where the guard records the attempts it stopped.
func fenceDir(dataDir string) string { return filepath.Join(dataDir, "fenced") }

// validAttemptName reports whether id can name a file of its own.
func validAttemptName(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsAny(id, "/\x00")
}

// writeFenceRecord records why the guard stopped attempt id; the first
// record of an attempt stays.
func writeFenceRecord(dataDir, id, why string) error {
	if !validAttemptName(id) {
		return fmt.Errorf("attempt id %q cannot name a file", id)
	}
	dir := fenceDir(dataDir)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, id), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if os.IsExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = f.WriteString(why)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// takeFenceRecord returns and removes the guard's record of why it
// stopped attempt id ("" when it did not).
func takeFenceRecord(dataDir, id string) string {
	if !validAttemptName(id) {
		return ""
	}
	path := filepath.Join(fenceDir(dataDir), id)
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	_ = os.Remove(path)
	return strings.TrimSpace(string(b))
}
