package fsm

import (
	"errors"
	"fmt"

	"herd/scheduler"
)

// CheckInvariants verifies the promise over the whole state:
//   - no node is over capacity: its reservations fit its resources and
//     its live attempts fit its slots;
//   - each node's reserved totals equal the sum of its live attempts;
//   - no task has more than one live attempt, and a task's live attempt
//     is its current one.
//
// Tests call it after every Apply; it is O(state) and not for production.
func (s *State) CheckInvariants() error {
	var errs []error
	nodes, err := s.Nodes()
	if err != nil {
		return err
	}
	reserved := map[string]scheduler.Resources{}
	live := map[string]int{}
	liveByTask := map[string][]string{}
	it, err := s.txn.Get(tableAttempts, "id")
	if err != nil {
		return fmt.Errorf("scan attempts: %w", err)
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		a := raw.(*Attempt)
		if !a.State.Live() {
			continue
		}
		reserved[a.NodeID] = reserved[a.NodeID].Add(a.Resources)
		live[a.NodeID]++
		liveByTask[a.TaskID] = append(liveByTask[a.TaskID], a.ID)
	}
	for _, n := range nodes {
		if n.Reserved != reserved[n.ID] || n.RunningAttempts != live[n.ID] {
			errs = append(errs, fmt.Errorf("node %s: books say %+v reserved in %d attempts, live attempts hold %+v in %d",
				n.ID, n.Reserved, n.RunningAttempts, reserved[n.ID], live[n.ID]))
		}
		if !n.Resources.Covers(n.Reserved) {
			errs = append(errs, fmt.Errorf("node %s over capacity: %+v reserved of %+v", n.ID, n.Reserved, n.Resources))
		}
		if n.RunningAttempts > n.Slots {
			errs = append(errs, fmt.Errorf("node %s over its slots: %d live attempts, %d slots", n.ID, n.RunningAttempts, n.Slots))
		}
	}
	for taskID, ids := range liveByTask {
		if len(ids) > 1 {
			errs = append(errs, fmt.Errorf("task %s has %d live attempts: %v", taskID, len(ids), ids))
			continue
		}
		t, err := s.Task(taskID)
		if err != nil {
			errs = append(errs, fmt.Errorf("live attempt %s of missing task %s", ids[0], taskID))
			continue
		}
		if t.CurrentAttempt != ids[0] {
			errs = append(errs, fmt.Errorf("task %s: live attempt %s is not its current attempt %q", taskID, ids[0], t.CurrentAttempt))
		}
	}
	return errors.Join(errs...)
}
