package bench

import (
	"fmt"
	"os"
	"runtime"
	"time"

	"herd/fsm"
	"herd/scheduler"
)

// benchRetention measures what finished tasks cost a replica's state and
// that retention gives it back: it drives one FSM (no Raft: this is the
// state's footprint, not the log's) through submit, reserve, start and
// success for every task, reads the heap, then forgets them all as the
// retention loop does and reads it again.
func benchRetention(sz benchSizes, r *Result) error {
	f, ids, baseline, err := loadFinished(sz.finishedTasks)
	if err != nil {
		return err
	}
	loaded := heapAfterGC()
	index := f.Index()
	apply := func(cmds [][]byte) error {
		index++
		_, err := applyChecked(f, index, cmds)
		return err
	}
	for start := 0; start < len(ids); start += finishedBatch {
		c, _ := fsm.Encode(fsm.MsgForgetTasks, fsm.ForgetTasksRequest{TaskIDs: ids[start:min(start+finishedBatch, len(ids))]})
		if err := apply([][]byte{c}); err != nil {
			return err
		}
	}
	_ = f.State()
	ids = nil
	forgotten := heapAfterGC()
	counts, _ := f.State().CountTasks()
	if left := counts[fsm.TaskSucceeded]; left != 0 {
		return fmt.Errorf("%d finished tasks left after forgetting all", left)
	}
	r.FinishedTasks = sz.finishedTasks
	r.FinishedHeapMiB = float64(loaded-baseline) / (1 << 20)
	r.FinishedBytesPerTask = float64(loaded-baseline) / float64(sz.finishedTasks)
	r.AfterRetentionHeapMiB = float64(max(forgotten, baseline)-baseline) / (1 << 20)
	runtime.KeepAlive(f)
	return nil
}

// finishedBatch is how many tasks one entry of loadFinished carries.
const finishedBatch = 1000

// applyChecked applies one batch entry of cmds at index and fails on any
// refused command.
func applyChecked(f *fsm.FSM, index uint64, cmds [][]byte) (fsm.BatchResult, error) {
	res, ok := f.ApplyBytes(index, fsm.EncodeBatch(cmds)).(fsm.BatchResult)
	if !ok {
		return nil, fmt.Errorf("entry %d was refused", index)
	}
	for i, x := range res {
		if err, isErr := x.(error); isErr {
			return nil, fmt.Errorf("entry %d command %d: %w", index, i, err)
		}
	}
	return res, nil
}

// loadFinished drives one FSM through submit, reserve, start and
// success of n tasks on 100 nodes, and returns it with the tasks' ids and
// the live heap before the tasks.
func loadFinished(n int) (*fsm.FSM, []string, uint64, error) {
	const nodes, batch = 100, finishedBatch
	f := fsm.New(nil)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	index := uint64(0)
	apply := func(cmds [][]byte) (fsm.BatchResult, error) {
		index++
		return applyChecked(f, index, cmds)
	}
	var cmds [][]byte
	// Three servers of this build, as every cluster's state records them:
	// what a state's snapshot is written in follows what they read.
	for _, id := range []string{"s1", "s2", "s3"} {
		c, _ := fsm.Encode(fsm.MsgUpsertServer, fsm.UpsertServerRequest{Server: fsm.Server{
			ID: id, RaftAddress: id + ":4647", HTTPAddress: id + ":4646", CommandForms: fsm.CommandForms,
		}})
		cmds = append(cmds, c)
	}
	for i := 0; i < nodes; i++ {
		c, _ := fsm.Encode(fsm.MsgRegisterNode, fsm.RegisterNodeRequest{Now: now, Node: fsm.Node{
			ID: fmt.Sprintf("node-%03d", i), Capabilities: map[string][]string{"exec": {"1"}},
			Resources: scheduler.Resources{CPUMillis: 1 << 40, MemoryMB: 1 << 40}, Slots: 1 << 30,
		}})
		cmds = append(cmds, c)
	}
	if _, err := apply(cmds); err != nil {
		return nil, nil, 0, err
	}
	baseline := heapAfterGC()
	var ids []string
	for start := 0; start < n; start += batch {
		k := min(batch, n-start)
		cmds = cmds[:0]
		for i := start; i < start+k; i++ {
			c, _ := fsm.Encode(fsm.MsgSubmitTask, fsm.SubmitTaskRequest{ID: fmt.Sprintf("01kbtask%018d", i), SubmittedAt: now, Spec: fsm.TaskSpec{Name: "done", IdempotencyKey: fmt.Sprint("key-", i), TaskShape: &fsm.TaskShape{
				Priority: 50, Command: []string{"true"}, Capability: "exec", CapabilityVersion: "1",
				Resources: scheduler.Resources{CPUMillis: 100, MemoryMB: 64}, TimeoutSeconds: 60, MaxAttempts: 3,
				Submitter: "bench",
			}}})
			cmds = append(cmds, c)
			ids = append(ids, fmt.Sprintf("01kbtask%018d", i))
		}
		if _, err := apply(cmds); err != nil {
			return nil, nil, 0, err
		}
		cmds = cmds[:0]
		for i := start; i < start+k; i++ {
			cmds = append(cmds, fsm.EncodeReserve(fsm.ReserveRequest{TaskID: ids[i], AttemptID: fmt.Sprintf("01kbatt%019d", i), Number: 1,
				NodeID: fmt.Sprintf("node-%03d", i%nodes), SessionGeneration: 1, Score: 1, Now: now, HeartbeatTTL: time.Hour}))
		}
		res, err := apply(cmds)
		if err != nil {
			return nil, nil, 0, err
		}
		starts, ends := make([][]byte, 0, k), make([][]byte, 0, k)
		for _, x := range res {
			a := x.(*fsm.ReserveResult).Attempt
			c, _ := fsm.Encode(fsm.MsgAttemptStart, fsm.AttemptStartRequest{AttemptID: a.ID, LeaseVersion: a.LeaseVersion, Now: now})
			starts = append(starts, c)
			c, _ = fsm.Encode(fsm.MsgAttemptEnd, fsm.AttemptEndRequest{AttemptID: a.ID, LeaseVersion: a.LeaseVersion, State: fsm.AttemptSucceeded, Now: now})
			ends = append(ends, c)
		}
		if _, err := apply(starts); err != nil {
			return nil, nil, 0, err
		}
		if _, err := apply(ends); err != nil {
			return nil, nil, 0, err
		}
		if start > 0 && start%200_000 == 0 {
			fmt.Fprintf(os.Stderr, "bench: %d tasks finished\n", start)
		}
	}
	_ = f.State() // a reader's view, as a replica always has some
	return f, ids, baseline, nil
}

// heapAfterGC is the live heap after a full collection.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
