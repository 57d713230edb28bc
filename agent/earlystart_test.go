package agent

import (
	"strings"
	"testing"
	"time"

	"herd/api"
)

// earlyAssignment is an attempt to start that the cluster lets the agent
// run for within before its start is committed.
func earlyAssignment(within time.Duration, command ...string) api.Assignment {
	x := assignment("RESERVED", command...)
	x.StartWithinMs = within.Milliseconds()
	return x
}

// awaitReports waits until done accepts the reports made so far.
func awaitReports(t *testing.T, c *cannedCluster, what string, done func([]api.AttemptReportItem) bool) []api.AttemptReportItem {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, reports := c.state(); done(reports) {
			return reports
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, reports := c.state()
	t.Fatalf("%s: reports so far %+v", what, reports)
	return nil
}

func hasResult(reports []api.AttemptReportItem) bool {
	for _, r := range reports {
		if r.Complete != nil {
			return true
		}
	}
	return false
}

// An attempt that ends before its start is reported has both committed
// by one report: its result, saying the start went unreported and how
// long the process ran.
func TestEarlyStartOfAShortAttemptGoesWithItsEnd(t *testing.T) {
	c := &cannedCluster{answers: []api.Assignments{
		{NodeID: "edge-1", SessionGeneration: 2, Liveness: "READY", Index: 11, AppliedIndex: 11, Attempts: []api.Assignment{earlyAssignment(time.Minute, "true")}},
	}}
	ag := runAgent(t, c)
	reports := awaitReports(t, c, "the result", hasResult)
	if len(reports) != 1 {
		t.Fatalf("want the result alone, got %d reports: %+v", len(reports), reports)
	}
	r := reports[0]
	if r.Start != nil || r.Complete.State != api.AttemptSucceeded || !r.Complete.StartUnreported || r.Complete.RanMs < 1 || r.Complete.LeaseVersion != 7 {
		t.Fatalf("report %+v %+v: want a success carrying its unreported start", r, r.Complete)
	}
	if started, _, _ := ag.Stats(); started != 1 {
		t.Fatalf("%d attempts started, want 1", started)
	}
}

// An attempt still running once the coalescing window has passed has its
// start reported on its own, while it runs, and its result after.
func TestEarlyStartOfALongAttemptIsReportedWhileItRuns(t *testing.T) {
	c := &cannedCluster{answers: []api.Assignments{
		{NodeID: "edge-1", SessionGeneration: 2, Liveness: "READY", Index: 11, AppliedIndex: 11, Attempts: []api.Assignment{earlyAssignment(time.Minute, "sleep", "1")}},
	}}
	runAgent(t, c)
	reports := awaitReports(t, c, "the result", hasResult)
	if len(reports) != 2 || reports[0].Start == nil || reports[0].Start.LeaseVersion != 7 || reports[1].Complete == nil {
		t.Fatalf("want the start, then the result: %+v", reports)
	}
	if end := reports[1].Complete; end.StartUnreported || end.State != api.AttemptSucceeded {
		t.Fatalf("result %+v: the start was reported, the result must not carry it", end)
	}
	// It carries how long the process ran, by which the cluster dates it.
	if end := reports[1].Complete; end.RanMs < 1000 {
		t.Fatalf("result %+v: ran_ms %d, but the process slept 1 s", end, end.RanMs)
	}
}

// An attempt started early whose start cannot be committed in the time
// the cluster gives is stopped before that time is up, and reported LOST
// with the reason: the cluster reclaims it after that and may place it
// elsewhere.
func TestEarlyStartNotCommittedInTimeIsStopped(t *testing.T) {
	c := &cannedCluster{startsUnknown: true, answers: []api.Assignments{
		{NodeID: "edge-1", SessionGeneration: 2, Liveness: "READY", Index: 11, AppliedIndex: 11, Attempts: []api.Assignment{earlyAssignment(1500*time.Millisecond, "sleep", "60")}},
	}}
	ag := runAgent(t, c)
	reports := awaitReports(t, c, "the result", hasResult)
	end := reports[len(reports)-1].Complete
	if end.State != api.AttemptLost || !strings.Contains(end.Error, "start could not be committed") || end.StartUnreported {
		t.Fatalf("result %+v: want LOST, its start never committed", end)
	}
	if started, _, _ := ag.Stats(); started != 1 {
		t.Fatalf("%d attempts started, want 1 (started early, then stopped)", started)
	}
	// The attempt leaves the running set once its report returns.
	waitFor(t, func() bool { return len(ag.Running()) == 0 })
}

// An attempt still reserved for an earlier session of the node may have
// been started by the agent's earlier run (started early, its start not
// committed before that run died): a restarted agent reports it LOST and
// does not run it again.
func TestAgentDoesNotRunAnAttemptOfAnEarlierSession(t *testing.T) {
	x := earlyAssignment(time.Minute, "true")
	x.EarlierSession = true
	c := &cannedCluster{answers: []api.Assignments{
		{NodeID: "edge-1", SessionGeneration: 2, Liveness: "READY", Index: 11, AppliedIndex: 11, Attempts: []api.Assignment{x}},
	}}
	ag := runAgent(t, c)
	reports := awaitReports(t, c, "the result", hasResult)
	end := reports[len(reports)-1].Complete
	if len(reports) != 1 || end.State != api.AttemptLost || !strings.Contains(end.Error, "earlier run may have started") {
		t.Fatalf("reports %+v, result %+v: want it LOST without a start", reports, end)
	}
	if started, _, _ := ag.Stats(); started != 0 {
		t.Fatalf("%d attempts started, want none", started)
	}
}
