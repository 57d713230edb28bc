package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"herd/agent"
)

// The bench's JSON has the top-level numeric keys the benchmark issue
// names (CI runs the bench itself, -quick, to see it complete).
func TestBenchJSONHasTheRequiredKeys(t *testing.T) {
	b, err := json.Marshal(Result{})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{
		"raft_ceiling_entries_per_sec", "placements_per_sec", "placement_to_ceiling_ratio", "e2e_tasks_per_sec",
		"e2e_submit_to_start_p99_ms", "decision_10k_nodes_ms", "queue_select_100k_ms", "replica_rss_mib", "failover_p99_ms",
		"snapshot_bytes", "snapshot_save_ms", "snapshot_restore_ms", "restart_to_ready_ms", "replica_idle_backlog_cpu_percent",
		"process_ceiling_tasks_per_sec", "e2e_to_process_ceiling_ratio",
		"e2e_processes_tasks_per_sec", "e2e_processes_to_ceiling_ratio", "herd_cpu_per_task_ms", "agents_1000_leader_cpu_pct", "agents_1000_false_verdicts",
		"failover_handover_p99_ms", "failover_extra_elections", "e2e_raft_commands_per_task", "e2e_raft_log_bytes_per_task", "e2e_processes_raft_commands_per_task", "e2e_processes_raft_log_bytes_per_task", "elections_at_loss_before", "elections_at_loss", "agents_elections", "agents_idle_raft_entries_per_sec",
	} {
		if _, numeric := got[key].(float64); !numeric {
			t.Errorf("bench JSON: %q is %v (%T), want a number", key, got[key], got[key])
		}
	}
}

// Options that would fail only later in a run are refused at once, with
// what was wrong.
func TestValidateRefusesBadOptions(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{AgentLimits: "cgroups"}, `agent limits "cgroups"`},
		{Options{LogStore: "sqlite"}, `log store "sqlite"`},
		{Options{Only: []string{"e2e", "nope"}}, `no bench step "nope"`},
		{Options{Agents: -1}, "agents -1"},
		{Options{Curves: []string{"queue_depth", "weather"}}, `no curve "weather"`},
	} {
		err := c.o.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one saying %s", c.o, err, c.want)
		}
	}
	for _, m := range agent.LimitMethods {
		if err := (Options{AgentLimits: m}).Validate(); err != nil {
			t.Errorf("limits %s refused: %v", m, err)
		}
	}
}

// The agents step counts refutations from the lines memberlist writes
// through the agent's logger (the agent hands memberlist a standard
// logger of its own), and nothing else it logs.
func TestRefutationsCountsMemberlistRefutations(t *testing.T) {
	var r refutations
	logger := hclog.New(&hclog.LoggerOptions{Output: &r, Level: hclog.Info})
	ml := logger.Named("gossip").StandardLogger(nil)
	ml.Printf("[WARN] memberlist: Refuting a suspect message (from: many-0001)")
	ml.Printf("[WARN] memberlist: Refuting a dead message (from: s2)")
	ml.Printf("[INFO] memberlist: Suspect many-0002 has failed, no acks received")
	ml.Printf("[WARN] memberlist: Refuting an alive message for 'many-0003' (127.0.0.1:7001)")
	logger.Info("joined the gossip pool", "members", 4)
	if got := r.n.Load(); got != 2 {
		t.Fatalf("counted %d refutations, want 2", got)
	}
}

// A run reports the sizes of its workloads, in its JSON and in the
// workload column of its table, whichever steps it runs.
func TestRunReportsItsWorkloadSizes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bench.json")
	var out bytes.Buffer
	if err := Run(Options{Quick: true, Only: []string{"decision"}, JSON: file}, &out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.PlacementNodes == 0 || r.PlacementBacklog == 0 || r.E2ETasks == 0 || r.FootprintNodes == 0 || r.FootprintTasks == 0 {
		t.Fatalf("workload sizes missing from the JSON: %+v", r)
	}
	for _, want := range []string{
		fmt.Sprintf("%d nodes, %d pending", r.PlacementNodes, r.PlacementBacklog),
		fmt.Sprintf("%d × true at once", r.E2ETasks),
		fmt.Sprintf("one replica process, %d nodes, %d tasks", r.FootprintNodes, r.FootprintTasks),
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table's workloads lack %q:\n%s", want, out.String())
		}
	}
}
