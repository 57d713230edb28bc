package test

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"herd/agent"
	"herd/api"
)

// metricValue finds a sample's value in Prometheus' text format.
func metricValue(t *testing.T, text, sample string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no sample %s in:\n%s", sample, text)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Every replica serves /metrics, lint-clean by Prometheus' own rules, and
// the counters, gauges and histograms move as the cluster works.
func TestMetricsLintCleanAndMoving(t *testing.T) {
	c := NewClusterWith(t, 3, agentSetup())
	a := c.StartAgent(agent.Config{ID: "edge-1", Slots: 2})
	WaitRegistered(t, a)
	cl := c.AllClient()
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, submit(t, cl, shSpec("m-"+strconv.Itoa(i), "true")))
	}
	failing := shSpec("m-fail", "exit 3")
	failing.MaxAttempts = ptrTo(1)
	ids = append(ids, submit(t, cl, failing))
	for _, id := range ids {
		waitTaskState(t, cl, id, api.TaskSucceeded, api.TaskFailed)
	}
	leader := c.WaitForLeader()
	for i := range c.Replicas {
		problems, err := testutil.GatherAndLint(c.Server(i).Registry())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("replica %d: %s: %s", i, p.Metric, p.Text)
		}
	}
	scrapeQuery := func(i int, query string) string {
		t.Helper()
		resp, err := http.Get("http://" + c.Replicas[i].Cfg.HTTPAddr + "/metrics" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
			t.Fatalf("GET /metrics: %s %s", resp.Status, resp.Header.Get("Content-Type"))
		}
		return string(b)
	}
	scrape := func(i int) string { t.Helper(); return scrapeQuery(i, "") }
	text := scrape(leader)
	if !strings.Contains(text, "process_cpu_seconds_total") || !strings.Contains(text, "go_goroutines") {
		t.Errorf("a full scrape lacks the process's or the runtime's families:\n%s", text)
	}
	// A scrape naming herd's own families gets those alone; one naming
	// another family too gets that one as well.
	own := scrapeQuery(leader, "?name[]=herd_tasks&name[]=herd_raft_term")
	if metricValue(t, own, `herd_tasks{state="SUCCEEDED"}`) != 5 || metricValue(t, own, "herd_raft_term") < 1 ||
		strings.Contains(own, "herd_nodes") || strings.Contains(own, "process_") || strings.Contains(own, "go_") {
		t.Errorf("a scrape of herd_tasks and herd_raft_term answered:\n%s", own)
	}
	if mixed := scrapeQuery(leader, "?name[]=herd_tasks&name[]=process_cpu_seconds_total"); !strings.Contains(mixed, "process_cpu_seconds_total") ||
		!strings.Contains(mixed, "herd_tasks{") || strings.Contains(mixed, "go_goroutines") {
		t.Errorf("a scrape of herd_tasks and process_cpu_seconds_total answered:\n%s", mixed)
	}
	if v := metricValue(t, text, "herd_scheduler_placements_total"); v < 6 {
		t.Errorf("placements %v, want at least 6", v)
	}
	// Ends are committed by whichever replica led when each was reported.
	var succeeded, failed float64
	for i := range c.Replicas {
		other := scrape(i)
		if strings.Contains(other, `herd_attempts_ended_total{outcome="SUCCEEDED"}`) {
			succeeded += metricValue(t, other, `herd_attempts_ended_total{outcome="SUCCEEDED"}`)
		}
		if strings.Contains(other, `herd_attempts_ended_total{outcome="FAILED"}`) {
			failed += metricValue(t, other, `herd_attempts_ended_total{outcome="FAILED"}`)
		}
	}
	if succeeded != 5 || failed != 1 {
		t.Errorf("attempts ended: %v succeeded, %v failed; want 5 and 1", succeeded, failed)
	}
	if v := metricValue(t, text, `herd_tasks{state="SUCCEEDED"}`); v != 5 {
		t.Errorf("tasks SUCCEEDED %v", v)
	}
	if !regexp.MustCompile(`(?m)^herd_nodes\{liveness="READY",tier="L[123]"\} 1$`).MatchString(text) {
		t.Errorf("no READY node counted by tier:\n%s", text)
	}
	if v := metricValue(t, text, `herd_raft_state{state="Leader"}`); v != 1 {
		t.Errorf("the leader's raft state gauge is %v", v)
	}
	if v := metricValue(t, text, "herd_task_submit_to_start_seconds_count"); v < 1 {
		t.Errorf("submit-to-start observations %v", v)
	}
	// Six tasks were submitted and six attempts ended: the leader applied
	// at least that many of each command, in entries of some bytes.
	for _, c := range []string{"submit-task", "reserve"} {
		if v := metricValue(t, text, `herd_raft_commands_applied_total{command="`+c+`"}`); v < 6 {
			t.Errorf("%s commands applied: %v, want 6 or more", c, v)
		}
	}
	// An end comes alone, or with its start as one attempt-run.
	ends := 0.0
	for _, c := range []string{"attempt-end", "attempt-run"} {
		if sample := `herd_raft_commands_applied_total{command="` + c + `"}`; strings.Contains(text, sample+" ") {
			ends += metricValue(t, text, sample)
		}
	}
	if ends < 6 {
		t.Errorf("attempt ends applied: %v, want 6 or more", ends)
	}
	if v := metricValue(t, text, "herd_raft_applied_bytes_total"); v < 100 {
		t.Errorf("applied bytes %v", v)
	}
	problems, err := testutil.GatherAndLint(a.Agent.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("agent: %s: %s", p.Metric, p.Text)
	}
	// One started counter, one slots gauge, disk bytes for logs, outputs
	// and images, the image cache's cap and its three outcomes.
	if n, err := testutil.GatherAndCount(a.Agent.Registry(), "herd_agent_attempts_started_total", "herd_agent_slots", "herd_agent_disk_bytes",
		"herd_agent_image_cache_max_bytes", "herd_agent_image_resolutions_total"); err != nil || n != 9 {
		t.Errorf("agent metrics: %d samples (%v)", n, err)
	}
	families, err := a.Agent.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "herd_agent_attempts_started_total" && f.GetMetric()[0].GetCounter().GetValue() < 6 {
			t.Errorf("the agent counted %v starts, want 6", f.GetMetric()[0].GetCounter().GetValue())
		}
	}
	// The snapshot's age appears once the leader has taken one.
	if strings.Contains(text, "herd_raft_snapshot_age_seconds ") {
		t.Error("a snapshot age before any snapshot")
	}
	if err := cl.SnapshotSave(Ctx(t, time.Minute), io.Discard); err != nil {
		t.Fatal(err)
	}
	if age := metricValue(t, scrape(leader), "herd_raft_snapshot_age_seconds"); age < 0 || age > 60 {
		t.Errorf("snapshot age %v s just after a snapshot", age)
	}
	before := metricValue(t, text, "herd_scheduler_passes_total")
	submit(t, cl, shSpec("m-more", "true"))
	if !Eventually(10*time.Second, func() bool { return metricValue(t, scrape(leader), "herd_scheduler_passes_total") > before }) {
		t.Error("the passes counter did not move")
	}
}
