package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"herd/agent"
	"herd/api"
	"herd/fsm"

	"github.com/anishathalye/porcupine"
)

func (ch *chaos) recordHash(replica string, index uint64, st *fsm.State) {
	if !ch.hashing.Load() {
		return
	}
	h, err := st.Hash()
	if err != nil {
		ch.anomaly(CheckHashes, "%s: hash at %d: %v", replica, index, err)
		return
	}
	ch.hashMu.Lock()
	if ch.hashes[replica] == nil {
		ch.hashes[replica] = map[uint64]string{}
	}
	ch.hashes[replica][index] = h
	ch.hashMu.Unlock()
}

// quiesce heals every fault, brings every replica and agent back and waits
// until every task the clients may have created has ended.
func (ch *chaos) quiesce() {
	ch.net.Heal()
	for i := range ch.c.Replicas {
		if ch.c.Server(i) == nil {
			ch.c.Start(i)
		}
	}
	ch.c.WaitForLeader()
	cl := ch.c.AllClient()
	ch.mu.Lock()
	keys := map[string]bool{}
	for k := range ch.acked {
		keys[k] = true
	}
	for k := range ch.unknownKey {
		keys[k] = true
	}
	ch.mu.Unlock()
	var last string
	ok := Eventually(90*time.Second, func() bool {
		i := ch.leader()
		if i < 0 {
			return false
		}
		st := ch.c.Server(i).FSM().State()
		for k := range keys {
			task, err := st.TaskByIdempotencyKey(k)
			if err != nil || task == nil {
				continue // an unknown submit that never happened
			}
			if !task.State.Terminal() {
				last = fmt.Sprintf("task %s (key %s) is %s: %s", task.ID, k, task.State, task.LastExplain())
				return false
			}
		}
		return true
	})
	if !ok {
		ch.anomaly(CheckTerminal, "tasks did not all end within 90s of healing; last: %s", last)
	}
	// Hash every replica's state from here on, and make a few entries
	// happen: a marker task runs to completion.
	ch.hashing.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := cl.SubmitTask(ctx, api.TaskSpec{IdempotencyKey: fmt.Sprintf("marker-%d", ch.cfg.Seed), Command: []string{"true"}}); err != nil {
		ch.anomaly(CheckHashes, "marker submit after healing failed: %v", err)
	}
}

func (ch *chaos) check() {
	// Acknowledged submits on every replica, each ended, at one index.
	var target uint64
	if srv := ch.c.Server(ch.c.WaitForLeader()); srv != nil {
		target = srv.FSM().Index()
	}
	ch.c.WaitApplied(target)
	ch.mu.Lock()
	acked := make(map[string]string, len(ch.acked))
	for k, v := range ch.acked {
		acked[k] = v
	}
	ch.mu.Unlock()
	for i, r := range ch.c.Replicas {
		st := ch.c.Server(i).FSM().State()
		for key, id := range acked {
			task, err := st.TaskByIdempotencyKey(key)
			switch {
			case err != nil || task == nil:
				ch.anomaly(CheckAcked, "%s: acknowledged task %s (key %s) missing", r.Cfg.ID, id, key)
			case task.ID != id:
				ch.anomaly(CheckIdempotency, "%s: key %s is task %s, acknowledged as %s", r.Cfg.ID, key, task.ID, id)
			case !task.State.Terminal():
				ch.anomaly(CheckTerminal, "%s: task %s still %s", r.Cfg.ID, id, task.State)
			}
		}
		// The check an operator asks of a running replica, at the end.
		if check := ch.c.Server(i).CheckState(); !check.OK {
			ch.anomaly(CheckInvariants, "%s at index %d, at the end: %v", r.Cfg.ID, check.Index, check.Violations)
		}
	}

	// Zombie replays: none with another outcome may have been accepted,
	// and no attempt may carry a claimed outcome it did not have before.
	st := ch.c.Server(ch.c.WaitForLeader()).FSM().State()
	ch.mu.Lock()
	replays := slices.Clone(ch.replays)
	ch.mu.Unlock()
	for _, rp := range replays {
		if rp.accepted && !rp.duplicate {
			ch.anomaly(CheckStale, "attempt %s (%s) accepted a replayed %s with lease %d", rp.attemptID, rp.before, rp.claimed, rp.lease)
		}
		if a, err := st.Attempt(rp.attemptID); err == nil && a != nil && a.State != rp.before {
			ch.anomaly(CheckStale, "attempt %s changed from %s to %s after a zombie replay", rp.attemptID, rp.before, a.State)
		}
	}

	// Equal hashes at every index all replicas hashed.
	if !Eventually(30*time.Second, func() bool { return len(ch.commonHashIndexes()) > 0 }) {
		ch.anomaly(CheckHashes, "replicas hashed no common index after healing")
	}
	ch.hashing.Store(false)
	ch.hashMu.Lock()
	for _, idx := range ch.commonHashIndexesLocked() {
		var first, firstID string
		for id, m := range ch.hashes {
			if first == "" {
				first, firstID = m[idx], id
			} else if m[idx] != first {
				ch.anomaly(CheckHashes, "index %d: %s hash %.12s, %s hash %.12s", idx, firstID, first, id, m[idx])
			}
		}
	}
	ch.hashMu.Unlock()

	ch.checkLinearizable()
	ch.checkNoOverlap()
}

func (ch *chaos) commonHashIndexes() []uint64 {
	ch.hashMu.Lock()
	defer ch.hashMu.Unlock()
	return ch.commonHashIndexesLocked()
}

func (ch *chaos) commonHashIndexesLocked() []uint64 {
	if len(ch.hashes) < len(ch.c.Replicas) {
		return nil
	}
	var out []uint64
	for _, m := range ch.hashes {
		for idx := range m {
			all := true
			for _, o := range ch.hashes {
				if _, ok := o[idx]; !ok {
					all = false
					break
				}
			}
			if all {
				out = append(out, idx)
			}
		}
		break
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (ch *chaos) checkLinearizable() {
	ch.mu.Lock()
	history := slices.Clone(ch.history)
	ch.mu.Unlock()
	res, info := porcupine.CheckOperationsVerbose(TaskModel, history, 60*time.Second)
	switch res {
	case porcupine.Ok:
		return
	case porcupine.Unknown:
		ch.t.Logf("chaos seed %d: linearizability check timed out (%d operations); counted as no anomaly", ch.cfg.Seed, len(history))
		return
	}
	dir := ch.cfg.OutDir
	if dir == "" {
		dir = ch.t.ArtifactDir()
	}
	base := filepath.Join(dir, fmt.Sprintf("chaos-%d", ch.cfg.Seed))
	if b, err := json.MarshalIndent(history, "", " "); err == nil {
		_ = os.WriteFile(base+"-history.json", b, 0o644)
	}
	if err := porcupine.VisualizePath(TaskModel, info, base+"-porcupine.html"); err != nil {
		ch.t.Logf("visualize: %v", err)
	}
	ch.anomaly(CheckLinearizable, "history of %d operations is not linearizable; see %s-porcupine.html", len(history), base)
}

// taskState is the model's knowledge of one task.
type taskState struct {
	Exists bool
	State  string
	Index  uint64
	// DoneNotCancelled: a cancel was refused because the task had ended
	// otherwise; the outcome is not known yet.
	DoneNotCancelled bool
}

func terminal(s string) bool { st, _ := fsm.ParseTaskState(s); return st.Terminal() }

// TaskModel is the sequential specification of one task as clients see
// it. The scheduler and agents move a task forward on their own, so a read
// may observe any later state; what it may not do is go back (a lower
// modify index, or another state at the same index), lose an acknowledged
// task, or change a task's terminal state.
var TaskModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(taskInput).Key
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return taskState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(taskState), input.(taskInput), output.(taskOutput)
		switch in.Kind {
		case "submit":
			s.Exists = true
			return true, s
		case "get", "cancel":
			if !out.Found {
				return !s.Exists, s
			}
			if !s.Exists {
				return false, s
			}
			if out.Rejected { // cancel refused: the task had ended another way
				if s.State == fsm.TaskCancelled.String() {
					return false, s
				}
				if s.State == "" || !terminal(s.State) {
					s.DoneNotCancelled = true
				}
				return true, s
			}
			if in.Kind == "cancel" && out.State != fsm.TaskCancelled.String() {
				return false, s
			}
			if out.Index < s.Index || (out.Index == s.Index && s.State != "" && out.State != s.State) {
				return false, s
			}
			if terminal(s.State) && out.State != s.State {
				return false, s
			}
			if s.DoneNotCancelled && (!terminal(out.State) || out.State == fsm.TaskCancelled.String()) {
				return false, s
			}
			s.State, s.Index = out.State, out.Index
			if terminal(out.State) {
				s.DoneNotCancelled = false
			}
			return true, s
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(taskInput), output.(taskOutput)
		switch {
		case out.Unknown:
			return fmt.Sprintf("%s(%s) → ?", in.Kind, in.Key)
		case in.Kind == "submit":
			return fmt.Sprintf("submit(%s) → ok", in.Key)
		case !out.Found:
			return fmt.Sprintf("%s(%s) → not found", in.Kind, in.Key)
		case out.Rejected:
			return fmt.Sprintf("cancel(%s) → 409", in.Key)
		}
		return fmt.Sprintf("%s(%s) → %s@%d", in.Kind, in.Key, out.State, out.Index)
	},
	DescribeState: func(state any) string {
		s := state.(taskState)
		if !s.Exists {
			return "absent"
		}
		return strings.TrimSpace(fmt.Sprintf("%s@%d %s", s.State, s.Index, map[bool]string{true: "(ended, not cancelled)"}[s.DoneNotCancelled]))
	},
}

func (ch *chaos) recordRun(r agent.RunRecord) {
	ch.runMu.Lock()
	ch.runs = append(ch.runs, r)
	ch.runMu.Unlock()
}

// allRuns is every attempt's run: the in-process agents' records of when
// each process was launched and reaped, except for the ticker tasks, whose
// runs are known wherever they ran (the process agent included) from
// their first and last ticks.
func (ch *chaos) allRuns() []agent.RunRecord {
	ticks := ch.tickRuns()
	ticked := map[string]bool{}
	for _, r := range ticks {
		ticked[r.Task] = true
	}
	ch.runMu.Lock()
	defer ch.runMu.Unlock()
	out := ticks
	for _, r := range ch.runs {
		if !ticked[r.Task] {
			out = append(out, r)
		}
	}
	return out
}

// checkNoOverlap: no two attempts of one task ran at the same time, by
// allRuns. (Every agent runs on this machine: their times are on one
// clock.)
func (ch *chaos) checkNoOverlap() {
	runs := ch.allRuns()
	byTask := map[string][]agent.RunRecord{}
	for _, r := range runs {
		byTask[r.Task] = append(byTask[r.Task], r)
	}
	for task, rs := range byTask {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Started.Before(rs[j].Started) })
		last := 0 // of the runs so far, the one that ended last
		for i := 1; i < len(rs); i++ {
			prev, next := rs[last], rs[i]
			if next.Started.Before(prev.Ended) {
				ch.anomaly(CheckOverlap, "task %s: attempt %s on %s started %v before attempt %s on %s ended",
					task, next.Attempt, next.Node, prev.Ended.Sub(next.Started).Round(time.Millisecond), prev.Attempt, prev.Node)
			}
			if next.Ended.After(prev.Ended) {
				last = i
			}
		}
	}
}
