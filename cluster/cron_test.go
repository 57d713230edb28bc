package cluster

import (
	"strings"
	"testing"
	"time"

	"herd/fsm"
	"herd/spec"
)

// Slots due: on time, and after an outage by the catch-up policy.
func TestDueSlots(t *testing.T) {
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	job := func(catchUp string) *fsm.Job {
		return &fsm.Job{State: fsm.JobScheduled, LastSlot: fsm.StampOf(start), Spec: spec.Job{Schedule: &spec.Schedule{Cron: "@every 10s", CatchUp: catchUp}}}
	}
	s, loc, err := parseSchedule(job("").Spec.Schedule)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, ok := due(job(""), s, loc, start.Add(9*time.Second), time.Second); ok {
		t.Fatal("nothing is due before the first slot")
	}
	slot, run, outcome, ok := due(job(""), s, loc, start.Add(10500*time.Millisecond), time.Second)
	if !ok || !run || !slot.Equal(start.Add(10*time.Second)) || outcome != "on time, fired 500ms after its slot" {
		t.Fatalf("on time: %v %v %q %v", slot, run, outcome, ok)
	}
	// An outage of a minute: six slots missed.
	later := start.Add(65 * time.Second)
	slot, run, outcome, ok = due(job(""), s, loc, later, time.Second)
	if !ok || run || !slot.Equal(start.Add(60*time.Second)) || !strings.HasPrefix(outcome, "skipped: 6 slots missed") {
		t.Fatalf("skip: %v %v %q", slot, run, outcome)
	}
	slot, run, outcome, ok = due(job(spec.CatchUpRunOnce), s, loc, later, time.Second)
	if !ok || !run || !slot.Equal(start.Add(60*time.Second)) || !strings.HasPrefix(outcome, "caught up: 6 slots missed") {
		t.Fatalf("run once: %v %v %q", slot, run, outcome)
	}
	// Missed slots before one that is on time are skipped, and it runs.
	slot, run, outcome, ok = due(job(""), s, loc, start.Add(60500*time.Millisecond), time.Second)
	if !ok || !run || !slot.Equal(start.Add(60*time.Second)) || !strings.Contains(outcome, "5 earlier slots") {
		t.Fatalf("on time after missed ones: %v %v %q", slot, run, outcome)
	}
	for _, bad := range []spec.Schedule{{Cron: "every 5s"}, {Cron: "* * *"}, {Cron: "@every 5s", TimeZone: "Mars/Olympus"}} {
		if _, _, err := parseSchedule(&bad); err == nil {
			t.Errorf("%+v parsed", bad)
		}
	}
	// Seconds are optional; zones move the slots.
	if _, _, err := parseSchedule(&spec.Schedule{Cron: "30 */5 * * * *", TimeZone: "Asia/Shanghai"}); err != nil {
		t.Fatal(err)
	}
}
