package fsm

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"herd/scheduler"
	"herd/spec"
)

// BenchmarkReserveApply measures applying reservations, 512 to an entry as
// the leader batches them, into a state holding 1,000 nodes and a deep
// pending backlog: the FSM's share of every placement, paid on each replica.
//
// "replicas=1" applies to one state with sequential ids. "replicas=3"
// is closer to the placement bench: ids made like the leader's (time
// first, then random), and each entry applied to three states in turn, as
// three replicas in one process do, so the records a search loads are
// rarely still in cache. Only the first state hands out views.
func BenchmarkReserveApply(b *testing.B) {
	b.Run("replicas=1", func(b *testing.B) {
		benchReserveApply(b, 1, func(kind string, i int) string { return fmt.Sprintf("%s-%07d", kind, i) })
	})
	b.Run("replicas=3", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(1, 2))
		start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
		benchReserveApply(b, 3, func(kind string, i int) string {
			// 40 ids per millisecond, like a leader submitting batches.
			return benchID(start.Add(time.Duration(i/40)*time.Millisecond), rng)
		})
	})
}

// benchID makes an id shaped like the leader's: 26 characters, the first
// ten the time in milliseconds, the rest random.
func benchID(t time.Time, rng *rand.Rand) string {
	return fmt.Sprintf("%010s%016x", strconv.FormatInt(t.UnixMilli(), 32), rng.Uint64())
}

func benchReserveApply(b *testing.B, replicas int, id func(kind string, i int) string) {
	const nodes, backlog, batch = 1000, 100_000, 512
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var (
		fsms     []*FSM
		index    uint64
		taskIDs  []string
		sessions map[string]uint64
		next     int
	)
	apply := func(cmds [][]byte) []any {
		index++
		entry := EncodeBatch(cmds)
		res := make([]any, len(fsms))
		for i, f := range fsms {
			res[i] = f.ApplyBytes(index, entry)
		}
		return res
	}
	var cmds [][]byte
	// load makes fresh states holding the nodes and the backlog; the
	// benchmark loads again (untimed) when it has placed the whole
	// backlog, however many iterations it is asked for.
	load := func() {
		fsms = make([]*FSM, replicas)
		for i := range fsms {
			fsms[i] = New(nil)
		}
		index, next = 0, 0
		apply(boundlessNodes(now, nodes, "node-%04d"))
		taskIDs = make([]string, backlog)
		for start := 0; start < backlog; start += 1000 {
			cmds = cmds[:0]
			for i := start; i < start+1000; i++ {
				taskIDs[i] = id("task", i)
				b, _ := Encode(MsgSubmitTask, SubmitTaskRequest{ID: taskIDs[i], SubmittedAt: now, Spec: TaskSpec{Name: "b", TaskShape: &TaskShape{
					Priority: 50, Command: []string{"true"}, Capability: "exec", CapabilityVersion: "1",
					Resources: scheduler.Resources{CPUMillis: 10, MemoryMB: 1}, TimeoutSeconds: 60, MaxAttempts: 1,
					Submitter: "team",
				}}})
				cmds = append(cmds, b)
			}
			apply(cmds)
		}
		sessions = map[string]uint64{}
		st := fsms[0].State()
		for i := 0; i < nodes; i++ {
			n, _ := st.Node(fmt.Sprintf("node-%04d", i))
			sessions[n.ID] = n.SessionGeneration
		}
	}
	load()
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		if next+batch > backlog {
			load()
		}
		cmds = cmds[:0]
		for i := 0; i < batch; i++ {
			node := fmt.Sprintf("node-%04d", (next+i)%nodes)
			c := EncodeReserve(ReserveRequest{TaskID: taskIDs[next+i], AttemptID: id("attempt", backlog+next+i), Number: 1,
				NodeID: node, SessionGeneration: sessions[node], Score: 1, Now: now, HeartbeatTTL: time.Hour})
			cmds = append(cmds, c)
		}
		next += batch
		b.StartTimer()
		res := apply(cmds)
		// The leader's next pass reads a view, so the entry after it
		// copies every tree node it changes, as on a leader.
		_ = fsms[0].State()
		for _, r := range res {
			if br, ok := r.(BatchResult); !ok || len(br) != batch {
				b.Fatalf("unexpected result %T", r)
			} else if rej, ok := br[0].(*Rejection); ok {
				b.Fatalf("rejected: %v", rej)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch*replicas), "ns/reservation")
}

// pendingFSM is a state holding n pending tasks submitted as the
// footprint bench does (key, env, a three-word command), in entries of 256.
func pendingFSM(n int) *FSM {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f := New(nil)
	var cmds [][]byte
	index := uint64(0)
	for i := 0; i < n; i++ {
		c, _ := Encode(MsgSubmitTask, SubmitTaskRequest{ID: fmt.Sprintf("01kb%022d", i), SubmittedAt: now, Spec: TaskSpec{Name: fmt.Sprint("t", i), IdempotencyKey: fmt.Sprint("k", i), TaskShape: &TaskShape{
			Priority: 50, Command: []string{"sh", "-c", "echo hello"}, Env: map[string]string{"K": "V"}, Capability: "exec",
			CapabilityVersion: "1", Resources: scheduler.Resources{CPUMillis: 100, MemoryMB: 64}, TimeoutSeconds: 3600,
			MaxAttempts: 3, Submitter: "default",
		}}})
		if cmds = append(cmds, c); len(cmds) == 256 || i == n-1 {
			index++
			f.ApplyBytes(index, EncodeBatch(cmds))
			cmds = cmds[:0]
		}
	}
	return f
}

// BenchmarkSnapshot writes and restores the snapshot of 100,000 pending
// tasks: what a replica pays to compact its log and to start from disk.
func BenchmarkSnapshot(b *testing.B) {
	const tasks = 100_000
	f := pendingFSM(tasks)
	var buf bytes.Buffer
	if err := writeSnapshot(&buf, f.State()); err != nil {
		b.Fatal(err)
	}
	b.Run("write", func(b *testing.B) {
		for b.Loop() {
			buf.Reset()
			if err := writeSnapshot(&buf, f.State()); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tasks), "ns/task")
	})
	b.Run("restore", func(b *testing.B) {
		for b.Loop() {
			if err := New(nil).Restore(io.NopCloser(bytes.NewReader(buf.Bytes()))); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tasks), "ns/task")
	})
}

// BenchmarkSnapshotFinished writes and restores the snapshot of 20,000
// finished tasks, each with its attempt and timeline, in each snapshot
// version: what a replica that keeps a long retention pays to compact
// its log and to start from disk.
func BenchmarkSnapshotFinished(b *testing.B) {
	const tasks = 20_000
	f := finishedFSM(b, tasks)
	for _, version := range []int{snapshotJSON, snapshotFramed} {
		var buf bytes.Buffer
		if err := writeSnapshotAs(&buf, f.State(), version); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("v%d/write", version), func(b *testing.B) {
			for b.Loop() {
				buf.Reset()
				if err := writeSnapshotAs(&buf, f.State(), version); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tasks), "ns/task")
			b.ReportMetric(float64(buf.Len())/tasks, "bytes/task")
		})
		b.Run(fmt.Sprintf("v%d/restore", version), func(b *testing.B) {
			for b.Loop() {
				if err := New(nil).Restore(io.NopCloser(bytes.NewReader(buf.Bytes()))); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tasks), "ns/task")
		})
	}
}

// finishedFSM is a state holding n tasks that each ran once and
// succeeded on one of 100 nodes, in entries of 500.
func finishedFSM(tb testing.TB, n int) *FSM {
	const nodes, batch = 100, 500
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f := New(nil)
	index := uint64(0)
	apply := func(cmds [][]byte) BatchResult {
		index++
		res, ok := f.ApplyBytes(index, EncodeBatch(cmds)).(BatchResult)
		if !ok {
			tb.Fatalf("entry %d refused", index)
		}
		for i, r := range res {
			if err, isErr := r.(error); isErr {
				tb.Fatalf("entry %d command %d: %v", index, i, err)
			}
		}
		return res
	}
	apply(boundlessNodes(now, nodes, "node-%03d"))
	var cmds [][]byte
	for start := 0; start < n; start += batch {
		k := min(batch, n-start)
		cmds = cmds[:0]
		for i := start; i < start+k; i++ {
			c, _ := Encode(MsgSubmitTask, SubmitTaskRequest{ID: fmt.Sprintf("01kbtask%018d", i), SubmittedAt: now, Spec: TaskSpec{Name: "done", IdempotencyKey: fmt.Sprint("key-", i), TaskShape: &TaskShape{
				Priority: 50, Command: []string{"true"}, Capability: "exec", CapabilityVersion: "1",
				Resources: scheduler.Resources{CPUMillis: 100, MemoryMB: 64}, TimeoutSeconds: 60, MaxAttempts: 3, Submitter: "bench",
			}}})
			cmds = append(cmds, c)
		}
		apply(cmds)
		cmds = cmds[:0]
		for i := start; i < start+k; i++ {
			cmds = append(cmds, EncodeReserve(ReserveRequest{TaskID: fmt.Sprintf("01kbtask%018d", i), AttemptID: fmt.Sprintf("01kbatt%019d", i), Number: 1,
				NodeID: fmt.Sprintf("node-%03d", i%nodes), SessionGeneration: 1, Score: 1, Now: now, HeartbeatTTL: time.Hour}))
		}
		res := apply(cmds)
		runs := make([][]byte, 0, k)
		for _, x := range res {
			a := x.(*ReserveResult).Attempt
			runs = append(runs, EncodeAttemptRun(AttemptRunRequest{StartedAt: now,
				End: AttemptEndRequest{AttemptID: a.ID, LeaseVersion: a.LeaseVersion, State: AttemptSucceeded, OutputTail: "ok\n", Now: now.Add(time.Second)},
			}))
		}
		apply(runs)
	}
	return f
}

// BenchmarkFootprint measures the heap a replica's state holds per task:
// 100,000 pending tasks submitted as the footprint bench does (key, env,
// a three-word command), in entries of 256.
func BenchmarkFootprint(b *testing.B) {
	const tasks = 100_000
	measure := func(b *testing.B, build func() *FSM) {
		for b.Loop() {
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			f := build()
			_ = f.State() // a view, as readers hold
			runtime.GC()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/tasks, "heap-bytes/task")
			runtime.KeepAlive(f)
		}
	}
	b.Run("pending", func(b *testing.B) { measure(b, func() *FSM { return pendingFSM(tasks) }) })
	// Once loaded, a leader explains each waiting task once (why it
	// waits): the state a backlog settles into.
	b.Run("explained", func(b *testing.B) {
		measure(b, func() *FSM {
			f := pendingFSM(tasks)
			now := time.Date(2026, 11, 30, 12, 1, 0, 0, time.UTC)
			var cmds [][]byte
			index := uint64(1 << 20)
			for i := 0; i < tasks; i++ {
				c, _ := Encode(MsgExplain, ExplainRequest{TaskID: fmt.Sprintf("01kb%022d", i), Summary: "0/1000 nodes eligible: 1000 draining", Now: now})
				if cmds = append(cmds, c); len(cmds) == 256 || i == tasks-1 {
					index++
					f.ApplyBytes(index, EncodeBatch(cmds))
					cmds = cmds[:0]
				}
			}
			return f
		})
	})
}

// BenchmarkActiveJobs measures what the leader's schedule loop reads on
// each of its ten ticks a second from a state holding a schedule beside
// 10,000 finished jobs (a minutely schedule's week of runs): every job,
// as the loop read them ("all", keeping the active ones), or the active
// ones alone.
func BenchmarkActiveJobs(b *testing.B) {
	f := New(nil)
	index := uint64(0)
	apply := func(mt MessageType, v any) {
		index++
		if err, ok := f.ApplyBytes(index, mustEncode(b, mt, v)).(error); ok {
			b.Fatal(err)
		}
	}
	one := []spec.Stage{stage("a")}
	apply(MsgSubmitJob, SubmitJobRequest{ID: "schedule", SubmittedAt: epoch, Spec: spec.Job{Name: "tick", Stages: one, Schedule: &spec.Schedule{Cron: "@every 1m"}}})
	for i := range 10_000 {
		id := fmt.Sprintf("run-%05d", i)
		apply(MsgSubmitJob, SubmitJobRequest{ID: id, SubmittedAt: epoch, Spec: spec.Job{Name: "run", Stages: one}})
		apply(MsgCancelJob, CancelJobRequest{JobID: id, Now: epoch})
	}
	b.Run("all", func(b *testing.B) {
		for b.Loop() {
			n := 0
			for _, j := range f.State().Jobs("", 0) {
				if j.State == JobScheduled || j.State == JobRunning {
					n++
				}
			}
			if n != 1 {
				b.Fatalf("%d active jobs", n)
			}
		}
	})
	b.Run("active", func(b *testing.B) {
		for b.Loop() {
			if n := len(f.State().ActiveJobs()); n != 1 {
				b.Fatalf("%d active jobs", n)
			}
		}
	})
}

// BenchmarkAttemptEndApply measures applying attempts' ends, 32 to an
// entry as agents' batched reports commit them, on a state shaped like
// the deployment bench's: two nodes of 64 slots running one class of
// short task. Each end rewrites the task, the attempt, the node's usage
// and the derived profile records (the node's history and the class's
// runs), all paid on every replica.
func BenchmarkAttemptEndApply(b *testing.B) {
	const nodes, slots, batch = 2, 64, 32
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f := New(nil)
	var index uint64
	apply := func(cmds [][]byte) BatchResult {
		index++
		res, ok := f.ApplyBytes(index, EncodeBatch(cmds)).(BatchResult)
		if !ok || len(res) != len(cmds) {
			b.Fatalf("unexpected result %T", res)
		}
		for _, r := range res {
			if rej, ok := r.(*Rejection); ok {
				b.Fatalf("rejected: %v", rej)
			}
		}
		return res
	}
	var cmds [][]byte
	sessions := map[string]uint64{}
	for i := range nodes {
		c, _ := Encode(MsgRegisterNode, RegisterNodeRequest{Now: now, Node: Node{
			ID: fmt.Sprintf("node-%d", i), Capabilities: map[string][]string{"exec": {"1"}},
			Resources: scheduler.Resources{CPUMillis: 64000, MemoryMB: 64 << 10}, Slots: slots,
		}})
		cmds = append(cmds, c)
	}
	apply(cmds)
	for i := range nodes {
		n, _ := f.State().Node(fmt.Sprintf("node-%d", i))
		sessions[n.ID] = n.SessionGeneration
	}
	seq := 0
	// prepare submits, reserves and starts one batch of tasks, returning
	// the encoded ends of their attempts.
	prepare := func() [][]byte {
		var submits, reserves, starts, ends [][]byte
		at := now.Add(time.Duration(seq) * time.Millisecond)
		for i := range batch {
			id := fmt.Sprintf("task-%08d", seq+i)
			c, _ := Encode(MsgSubmitTask, SubmitTaskRequest{ID: id, SubmittedAt: at, Spec: TaskSpec{Name: "bench", TaskShape: &TaskShape{
				Priority: 50, Command: []string{"true"}, Capability: "exec", CapabilityVersion: "1",
				Resources: scheduler.Resources{CPUMillis: 1000, MemoryMB: 64}, TimeoutSeconds: 60, MaxAttempts: 1,
				Submitter: "team",
			}}})
			submits = append(submits, c)
			node := fmt.Sprintf("node-%d", (seq+i)%nodes)
			reserves = append(reserves, EncodeReserve(ReserveRequest{TaskID: id, AttemptID: "a" + id, Number: 1,
				NodeID: node, SessionGeneration: sessions[node], Score: 1, Now: at, HeartbeatTTL: time.Hour}))
		}
		apply(submits)
		apply(reserves)
		for i := range batch {
			a, err := f.State().Attempt(fmt.Sprintf("atask-%08d", seq+i))
			if err != nil {
				b.Fatal(err)
			}
			starts = append(starts, EncodeAttemptStart(AttemptStartRequest{AttemptID: a.ID, LeaseVersion: a.LeaseVersion, Now: at.Add(time.Millisecond)}))
			ends = append(ends, EncodeAttemptEnd(AttemptEndRequest{AttemptID: a.ID, LeaseVersion: a.LeaseVersion, State: AttemptSucceeded,
				Now: at.Add(3 * time.Millisecond)}))
		}
		apply(starts)
		seq += batch
		return ends
	}
	// Fill the histories to their bounds before timing.
	for range 8 {
		apply(prepare())
	}
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		ends := prepare()
		b.StartTimer()
		apply(ends)
		_ = f.State() // the leader reads a view after each entry
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/end")
}

// boundlessNodes registers n nodes named by idFormat whose capacity and
// slots no benchmark fills.
func boundlessNodes(now time.Time, n int, idFormat string) [][]byte {
	cmds := make([][]byte, 0, n)
	for i := range n {
		c, _ := Encode(MsgRegisterNode, RegisterNodeRequest{Now: now, Node: Node{
			ID: fmt.Sprintf(idFormat, i), Capabilities: map[string][]string{"exec": {"1"}},
			Resources: scheduler.Resources{CPUMillis: 1 << 40, MemoryMB: 1 << 40}, Slots: 1 << 30,
		}})
		cmds = append(cmds, c)
	}
	return cmds
}
