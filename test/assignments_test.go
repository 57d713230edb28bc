package test

import (
	"testing"
	"time"

	"herd/api"
)

// An assignment watch that says what the node already knows (the digest)
// answers news for the node (here a new reservation) but not the node's
// own start report committing, which an agent has no use for.
func TestAssignmentWatchSkipsTheNodesOwnReports(t *testing.T) {
	c := NewClusterWith(t, 3, Setup{CheckInvariants: true})
	cl := c.AllClient()
	ctx := Ctx(t, 60*time.Second)
	registerNode(t, cl, "manual", 4000, 4096, 0, 4, nil) // no agent behind it
	first := submit(t, cl, shSpec("first", "true"))
	waitTaskState(t, cl, first, "SCHEDULED")
	var now api.Assignments
	if !Eventually(30*time.Second, func() bool {
		var err error
		now, err = cl.Assignments(ctx, "manual", api.AssignmentsQuery{})
		return err == nil && len(now.Attempts) == 1
	}) {
		t.Fatalf("the reservation never showed in the node's assignments: %+v", now)
	}

	answers := make(chan api.Assignments, 1)
	go func() {
		as, err := cl.Assignments(ctx, "manual", api.AssignmentsQuery{Index: now.Index, Wait: 40 * time.Second, Known: now.Digest()})
		if err != nil {
			t.Errorf("watch: %v", err)
		}
		answers <- as
	}()
	att := now.Attempts[0].Attempt
	if _, err := cl.StartAttempt(ctx, att.ID, att.LeaseVersion); err != nil {
		t.Fatal(err)
	}
	waitTaskState(t, cl, first, "RUNNING")
	second := submit(t, cl, shSpec("second", "true"))
	waitTaskState(t, cl, second, "SCHEDULED")
	select {
	case as := <-answers:
		if len(as.Attempts) != 2 {
			t.Fatalf("the watch answered the node's own start instead of the new reservation: %+v", as.Attempts)
		}
		// The answer says how far its replica had got: at least as far as
		// the list it shows, and past the first answer's replica.
		if as.AppliedIndex < as.Index || as.AppliedIndex <= now.AppliedIndex {
			t.Errorf("applied index %d (first answer %d) for a list at index %d", as.AppliedIndex, now.AppliedIndex, as.Index)
		}
		// A reserved attempt comes with its spec; a running one without
		// (its agent has it).
		for _, x := range as.Attempts {
			switch {
			case x.Attempt.State == "RESERVED" && len(x.Spec.Command) == 0:
				t.Errorf("reserved attempt %s came without its spec", x.Attempt.ID)
			case x.Attempt.State == "RUNNING" && len(x.Spec.Command) != 0:
				t.Errorf("running attempt %s came with its spec again: %+v", x.Attempt.ID, x.Spec)
			}
		}
	case <-ctx.Done():
		t.Fatal("the watch never answered the new reservation")
	}
}

// A reservation comes with the time its agent may run it before its start
// must be committed, and once the node registers again (a restarted
// agent) the attempt still reserved for the earlier session is marked so,
// while one reserved for the new session is not.
func TestAssignmentsMarkAttemptsOfAnEarlierSession(t *testing.T) {
	c := NewClusterWith(t, 3, Setup{CheckInvariants: true})
	cl := c.AllClient()
	ctx := Ctx(t, 60*time.Second)
	registerNode(t, cl, "manual", 4000, 4096, 0, 4, nil) // no agent behind it
	first := submit(t, cl, shSpec("first", "true"))
	waitTaskState(t, cl, first, "SCHEDULED")
	reserved := func(want int) api.Assignments {
		t.Helper()
		var as api.Assignments
		if !Eventually(30*time.Second, func() bool {
			var err error
			as, err = cl.Assignments(ctx, "manual", api.AssignmentsQuery{})
			return err == nil && len(as.Attempts) == want
		}) {
			t.Fatalf("want %d reserved attempts, got %+v", want, as)
		}
		return as
	}
	as := reserved(1)
	if x := as.Attempts[0]; x.StartWithinMs <= 0 || x.EarlierSession {
		t.Fatalf("a fresh reservation: start_within_ms %d, earlier_session %v", x.StartWithinMs, x.EarlierSession)
	}
	old := as.Attempts[0].Attempt.ID
	res := registerNode(t, cl, "manual", 4000, 4096, 0, 4, nil) // the agent restarted
	second := submit(t, cl, shSpec("second", "true"))
	waitTaskState(t, cl, second, "SCHEDULED")
	var again api.Assignments
	if !Eventually(30*time.Second, func() bool {
		again = reserved(2)
		return again.SessionGeneration == res.SessionGeneration
	}) {
		t.Fatalf("the list never reached session %d: %+v", res.SessionGeneration, again)
	}
	for _, x := range again.Attempts {
		if x.EarlierSession != (x.Attempt.ID == old) {
			t.Errorf("attempt %s (the earlier session's: %v) marked earlier_session %v", x.Attempt.ID, x.Attempt.ID == old, x.EarlierSession)
		}
	}
}

// An attempt still to start that was in the list the agent holds comes
// as its identity alone, marked held, with its own start deadline and
// session mark; one reserved after that list comes whole, and without
// Held every reserved attempt comes whole.
func TestAssignmentsSendHeldAttemptsAsIdentity(t *testing.T) {
	c := NewClusterWith(t, 3, Setup{CheckInvariants: true})
	cl := c.AllClient()
	ctx := Ctx(t, 60*time.Second)
	registerNode(t, cl, "manual", 4000, 4096, 0, 4, nil) // no agent behind it
	reserved := func(want int, q api.AssignmentsQuery) api.Assignments {
		t.Helper()
		var as api.Assignments
		if !Eventually(30*time.Second, func() bool {
			var err error
			as, err = cl.Assignments(ctx, "manual", q)
			return err == nil && len(as.Attempts) == want
		}) {
			t.Fatalf("want %d reserved attempts, got %+v", want, as)
		}
		return as
	}
	first := submit(t, cl, shSpec("first", "true"))
	waitTaskState(t, cl, first, "SCHEDULED")
	held := reserved(1, api.AssignmentsQuery{})
	if x := held.Attempts[0]; x.Held || len(x.Spec.Command) == 0 {
		t.Fatalf("the first list's attempt is not whole: %+v", x)
	}
	second := submit(t, cl, shSpec("second", "true"))
	waitTaskState(t, cl, second, "SCHEDULED")

	as := reserved(2, api.AssignmentsQuery{Held: held.Index})
	for _, x := range as.Attempts {
		if x.Attempt.ID == held.Attempts[0].Attempt.ID {
			if !x.Held || len(x.Spec.Command) != 0 || x.Attempt.NodeID != "" || x.Attempt.State != "RESERVED" {
				t.Errorf("the attempt of the held list came whole or unmarked: %+v", x)
			}
			if x.StartWithinMs <= 0 || x.Attempt.LeaseVersion != held.Attempts[0].Attempt.LeaseVersion || x.Attempt.TaskID != first {
				t.Errorf("the held attempt lacks its identity or start deadline: %+v", x)
			}
			continue
		}
		if x.Held || len(x.Spec.Command) == 0 || x.Attempt.TaskID != second {
			t.Errorf("the attempt reserved after the held list did not come whole: %+v", x)
		}
	}
	for _, x := range reserved(2, api.AssignmentsQuery{}).Attempts {
		if x.Held || len(x.Spec.Command) == 0 {
			t.Errorf("without held, attempt %s did not come whole: %+v", x.Attempt.ID, x)
		}
	}
}
