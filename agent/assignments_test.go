package agent

import (
	"testing"

	"herd/api"
)

// fillHeld completes an attempt the answer names as held from the kept
// list, with the answer's own deadline and session mark, and refuses an
// answer naming one the kept list lacks or holds at another lease.
func TestFillHeldCompletesFromTheKeptList(t *testing.T) {
	whole := api.Assignment{
		Attempt:       api.Attempt{ID: "a1", TaskID: "t1", Number: 1, State: api.AttemptReserved, LeaseVersion: 7, NodeID: "n"},
		Spec:          api.TaskSpec{Name: "one", Command: []string{"true"}},
		StartWithinMs: 9000,
	}
	running := api.Assignment{Attempt: api.Attempt{ID: "a0", TaskID: "t0", Number: 1, State: api.AttemptRunning, LeaseVersion: 5}}
	a := &Agent{last: &api.Assignments{Index: 10, Attempts: []api.Assignment{running, whole}}}

	fresh := api.Assignment{
		Attempt: api.Attempt{ID: "a2", TaskID: "t2", Number: 1, State: api.AttemptReserved, LeaseVersion: 11},
		Spec:    api.TaskSpec{Name: "two", Command: []string{"false"}},
	}
	held := api.Assignment{Attempt: api.Attempt{ID: "a1", TaskID: "t1", Number: 1, State: api.AttemptReserved, LeaseVersion: 7},
		StartWithinMs: 4000, EarlierSession: true, Held: true}
	as := &api.Assignments{Index: 12, Attempts: []api.Assignment{running, held, fresh}}
	if !a.fillHeld(as) {
		t.Fatal("an attempt of the kept list was refused")
	}
	got := as.Attempts[1]
	if got.Held || got.Spec.Name != "one" || got.Attempt.NodeID != "n" || got.StartWithinMs != 4000 || !got.EarlierSession {
		t.Fatalf("held attempt completed as %+v", got)
	}
	if as.Attempts[2].Spec.Name != "two" || as.Attempts[0].Attempt.State != api.AttemptRunning {
		t.Fatalf("the other attempts changed: %+v", as.Attempts)
	}

	for name, x := range map[string]api.Assignment{
		"missing":       {Attempt: api.Attempt{ID: "a9", State: api.AttemptReserved, LeaseVersion: 7}, Held: true},
		"another lease": {Attempt: api.Attempt{ID: "a1", State: api.AttemptReserved, LeaseVersion: 8}, Held: true},
		"kept running":  {Attempt: api.Attempt{ID: "a0", State: api.AttemptReserved, LeaseVersion: 5}, Held: true},
	} {
		if a.fillHeld(&api.Assignments{Attempts: []api.Assignment{x}}) {
			t.Errorf("%s: an attempt the kept list does not hold whole was accepted", name)
		}
	}
	if (&Agent{}).fillHeld(&api.Assignments{Attempts: []api.Assignment{held}}) {
		t.Error("an agent with no kept list accepted a held attempt")
	}
}
