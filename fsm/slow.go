package fsm

import (
	"fmt"
	"time"
)

// AttemptSlowRequest marks a running attempt slow: it has run past its
// class's slow threshold (SlowThreshold). The leader proposes it; Apply
// checks it against the committed facts and the command's time.
type AttemptSlowRequest struct {
	AttemptID string    `json:"attempt_id"`
	Now       time.Time `json:"now"`
}

// slowThreshold is how long an attempt of class on node may run before it
// is slow: the settings' factor of the class's fleet median on other
// nodes (over at least 3 runs), and at least the floor; false when it is
// off or the class has too little history.
func slowThreshold(db *store, class, node string) (time.Duration, int64, bool) {
	ps := db.profileSettings()
	if ps.SlowAttemptPercent == 0 {
		return 0, 0, false
	}
	median, k := db.class(class).median(node)
	if k < minSamplesForMedian || median <= 0 {
		return 0, 0, false
	}
	return max(ms(median*int64(ps.SlowAttemptPercent)/100), ms(ps.SlowAttemptFloorMs)), median, true
}

// SlowThreshold is how long an attempt of class on node may run before
// it is marked slow; false when there is no threshold (too little history
// of the class on other nodes, or the rule is off).
func (s *State) SlowThreshold(class, node string) (time.Duration, bool) {
	d, _, ok := slowThreshold(s.st, class, node)
	return d, ok
}

func applyAttemptSlow(db *store, index uint64, r *AttemptSlowRequest) (any, error) {
	a, err := getAttempt(db, r.AttemptID)
	if err != nil {
		return nil, err
	}
	task, err := getTask(db, a.TaskID)
	if err != nil {
		return nil, err
	}
	if a.State != AttemptRunning || task.CurrentAttempt() != a.ID || task.CurrentSlow() {
		return nil, reject(RejectConflict, "attempt %s is %s (marked slow: %v): nothing to mark", a.ID, a.State, task.CurrentSlow())
	}
	class := task.Spec.ClassOf()
	limit, median, ok := slowThreshold(db, class, a.NodeID)
	ran := StampOf(r.Now).Sub(a.StartedAt)
	if !ok || ran < limit {
		return nil, reject(RejectConflict, "attempt %s ran %s: not slow (threshold %s)", a.ID, ran.Round(time.Millisecond), limit)
	}
	node, err := getNode(db, a.NodeID)
	if err != nil {
		return nil, err
	}
	ps := db.profileSettings()
	msg := fmt.Sprintf("attempt %d on %s has run %s, over %s the fleet median of class %s (%s) and at least %s: slow",
		a.Number, a.NodeID, ran.Round(time.Second), factorText(ps.SlowAttemptPercent), class, ms(median), ms(ps.SlowAttemptFloorMs))
	t := task.clone()
	t.ModifyIndex = index
	t.currentSlow = true
	t.addEvent(index, r.Now, EventSlow, msg)
	n := node.clone()
	n.ModifyIndex = index
	n.addEvent(index, r.Now, EventSlow, msg)
	// Its time so far counts as a run of the node now, toward demotion:
	// a hung attempt may never end on its own.
	n.History = n.History.clone()
	noteRun(db, n, ps, class, int64(ran/time.Millisecond), a.StartedAt, index, r.Now)
	db.putTask(t)
	db.putNode(n)
	return &AttemptResult{Attempt: a, Task: t}, nil
}
