package test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"herd/api"
	"herd/config"
)

func echoSpec(key string) api.TaskSpec {
	return api.TaskSpec{Name: "echo", IdempotencyKey: key, Command: []string{"sh", "-c", "echo hi"}}
}

// Test 1: submit through a follower; the task is readable on all three.
func TestSubmitThroughFollowerReadableEverywhere(t *testing.T) {
	c := NewCluster(t, 3)
	f := c.Follower()
	ctx := Ctx(t, 30*time.Second)
	res, created, err := c.Client(f).SubmitTask(ctx, echoSpec("k-1"))
	if err != nil {
		t.Fatalf("submit via follower %s: %v", c.Replicas[f].Cfg.ID, err)
	}
	if !created || res.State != "PENDING" || res.Index == 0 {
		t.Fatalf("unexpected submit answer %+v created=%v", res, created)
	}
	c.WaitApplied(res.Index)
	for i := range c.Replicas {
		task, meta, err := c.Client(i).GetTask(ctx, res.ID, api.ReadOptions{})
		if err != nil {
			t.Fatalf("read on %s: %v", c.Replicas[i].Cfg.ID, err)
		}
		if task.ID != res.ID || task.Spec.Command[2] != "echo hi" || meta.Index < res.Index || !meta.KnownLeader {
			t.Fatalf("replica %s answered %+v meta %+v", c.Replicas[i].Cfg.ID, task, meta)
		}
	}
}

func submitN(t *testing.T, cl *api.Client, prefix string, n int) []api.SubmitResponse {
	t.Helper()
	ctx := Ctx(t, 2*time.Minute)
	out := make([]api.SubmitResponse, 0, n)
	for i := 0; i < n; i++ {
		res, _, err := cl.SubmitTask(ctx, echoSpec(fmt.Sprintf("%s-%d", prefix, i)))
		if err != nil {
			t.Fatalf("submit %s-%d: %v", prefix, i, err)
		}
		out = append(out, res)
	}
	return out
}

// requireTasks checks that every acknowledged task is readable on every
// running replica once it has applied the highest acknowledged index.
func requireTasks(t *testing.T, c *Cluster, acked []api.SubmitResponse) {
	t.Helper()
	var maxIndex uint64
	for _, a := range acked {
		maxIndex = max(maxIndex, a.Index)
	}
	c.WaitApplied(maxIndex)
	ctx := Ctx(t, time.Minute)
	for i, r := range c.Replicas {
		if r.Server == nil {
			continue
		}
		for _, a := range acked {
			if _, _, err := c.Client(i).GetTask(ctx, a.ID, api.ReadOptions{}); err != nil {
				t.Fatalf("acknowledged task %s missing on %s: %v", a.ID, r.Cfg.ID, err)
			}
		}
	}
}

// Test 2: kill the leader; a new one is elected; submits continue; the old
// leader restarts from its data dir and catches up.
func TestLeaderFailoverAndCatchUp(t *testing.T) {
	// Stopped, the leader hands its leadership over; crashed (no drain,
	// no handover), the others elect a new one after their timeout.
	for _, how := range []string{"stop", "crash"} {
		t.Run(how, func(t *testing.T) {
			c := NewCluster(t, 3)
			cl := c.AllClient()
			before := submitN(t, cl, "before", 20)
			old := c.WaitForLeader()
			if how == "stop" {
				c.Stop(old)
			} else {
				c.Crash(old)
			}
			next := c.WaitForLeader()
			if next == old {
				t.Fatal("stopped replica still reported as leader")
			}
			after := submitN(t, cl, "after", 20)
			c.Start(old)
			requireTasks(t, c, append(before, after...))
			if c.Replicas[old].Server.FSM().Index() < after[len(after)-1].Index {
				t.Fatal("restarted replica did not catch up")
			}
		})
	}
}

// A leader that stops hands its leadership over: once every replica's
// heartbeat and election timeouts are far longer than the test waits,
// only a handover can give the others a leader.
func TestStoppingLeaderHandsLeadershipOver(t *testing.T) {
	c := NewCluster(t, 3)
	cl := c.AllClient()
	before := submitN(t, cl, "before", 5)
	old := c.WaitForLeader()
	for i := range c.Replicas {
		r := c.Replicas[i].Cfg.Raft
		if err := c.Server(i).Raft().ReloadConfig(raft.ReloadableConfig{
			TrailingLogs: r.TrailingLogs, SnapshotInterval: r.SnapshotInterval, SnapshotThreshold: r.SnapshotThreshold,
			HeartbeatTimeout: 10 * time.Minute, ElectionTimeout: 10 * time.Minute,
		}); err != nil {
			t.Fatal(err)
		}
	}
	term := c.Server(old).Raft().CurrentTerm()
	c.Stop(old)
	next := -1
	if !Eventually(time.Minute, func() bool {
		for i := range c.Replicas {
			if s := c.Server(i); s != nil && s.IsLeader() {
				next = i
				return true
			}
		}
		return false
	}) {
		t.Fatal("no replica took over from the stopping leader")
	}
	if got := c.Server(next).Raft().CurrentTerm(); got <= term {
		t.Fatalf("new leader in term %d, the stopped one led term %d", got, term)
	}
	after := submitN(t, cl, "after", 5)
	requireTasks(t, c, append(before, after...))
}

// Test 3: every acknowledged task survives a full stop of all replicas.
func TestFullRestartKeepsAcknowledgedTasks(t *testing.T) {
	c := NewCluster(t, 3)
	acked := submitN(t, c.AllClient(), "full", 30)
	c.StopAll()
	for i := range c.Replicas {
		c.Start(i)
	}
	c.WaitForLeader()
	requireTasks(t, c, acked)
	list, _, err := c.AllClient().ListTasks(Ctx(t, 10*time.Second), api.TaskQuery{Limit: 1000}, api.ReadOptions{Consistent: true})
	if err != nil || len(list.Tasks) != len(acked) {
		t.Fatalf("want %d tasks after restart, got %d (%v)", len(acked), len(list.Tasks), err)
	}
}

// Test 4: enough writes to force snapshots and log truncation; a restart
// restores from snapshot plus trailing logs. With each log store.
func TestSnapshotTruncationAndRestart(t *testing.T) {
	for _, store := range []string{config.LogStoreBoltDB, config.LogStoreWAL} {
		t.Run(store, func(t *testing.T) { snapshotTruncationAndRestart(t, store) })
	}
}

func snapshotTruncationAndRestart(t *testing.T, store string) {
	c := NewCluster(t, 3, func(cfg *config.Server) {
		cfg.Raft.SnapshotThreshold = 40
		cfg.Raft.TrailingLogs = 10
		cfg.Raft.SnapshotInterval = 100 * time.Millisecond
		cfg.Raft.LogStore = store
	})
	acked := submitN(t, c.AllClient(), "snap", 150)
	if !Eventually(30*time.Second, func() bool {
		for _, r := range c.Replicas {
			first, err := r.Server.FirstLogIndex()
			if err != nil || first <= 1 || r.Server.RaftStats()["last_snapshot_index"] == "0" {
				return false
			}
		}
		return true
	}) {
		t.Fatal("replicas did not snapshot and truncate their logs")
	}
	// A few writes after the snapshot live only in the trailing log.
	tail := submitN(t, c.AllClient(), "tail", 5)
	c.StopAll()
	for i := range c.Replicas {
		c.Start(i)
	}
	c.WaitForLeader()
	for _, r := range c.Replicas {
		first, err := r.Server.FirstLogIndex()
		if err != nil || first <= 1 {
			t.Fatalf("%s: log should still start after the snapshot, first index %d (%v)", r.Cfg.ID, first, err)
		}
	}
	requireTasks(t, c, append(acked, tail...))
}

// A replica's log store is changed one replica at a time while the
// others serve, and then back for all at once: each restart copies the
// log over, and no acknowledged task is lost either way.
func TestLogStoreChangeKeepsAcknowledgedTasks(t *testing.T) {
	c := NewCluster(t, 3, func(cfg *config.Server) { cfg.Raft.LogStore = config.LogStoreBoltDB })
	cl := c.AllClient()
	acked := submitN(t, cl, "bolt", 20)
	for i, r := range c.Replicas {
		c.Stop(i)
		r.Cfg.Raft.LogStore = config.LogStoreWAL
		c.Start(i)
		c.WaitForLeader()
		acked = append(acked, submitN(t, cl, fmt.Sprintf("rolling-%d", i), 5)...)
		raftDir := filepath.Join(r.Cfg.DataDir, "raft")
		if _, err := os.Stat(filepath.Join(raftDir, "wal")); err != nil {
			t.Fatalf("%s: no wal after the change: %v", r.Cfg.ID, err)
		}
		if _, err := os.Stat(filepath.Join(raftDir, "raft.db")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: raft.db is still there after the change to wal (%v)", r.Cfg.ID, err)
		}
	}
	requireTasks(t, c, acked)
	c.StopAll()
	for i, r := range c.Replicas {
		r.Cfg.Raft.LogStore = config.LogStoreBoltDB
		c.Start(i)
	}
	c.WaitForLeader()
	acked = append(acked, submitN(t, cl, "back", 5)...)
	requireTasks(t, c, acked)
}

// Test 5: remove-peer and transfer-leadership show in the configuration.
func TestRemovePeerAndTransferLeadership(t *testing.T) {
	c := NewCluster(t, 3)
	ctx := Ctx(t, 30*time.Second)
	old := c.WaitForLeader()
	f := c.Follower()
	newLeader, err := c.Client(f).TransferLeadership(ctx, "")
	if err != nil {
		t.Fatalf("transfer leadership: %v", err)
	}
	if newLeader.ID == c.Replicas[old].Cfg.ID {
		t.Fatalf("leadership did not move: %+v", newLeader)
	}
	now := c.WaitForLeader()
	if now == old {
		t.Fatal("old leader leads again")
	}
	conf, err := c.Client(old).RaftConfiguration(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range conf.Servers {
		if s.Leader != (s.ID == c.Replicas[now].Cfg.ID) {
			t.Fatalf("configuration marks the wrong leader: %+v", conf)
		}
	}

	// Remove a follower through another follower (forwarded to the leader).
	var victim, via int = -1, -1
	for i := range c.Replicas {
		if i == now {
			continue
		}
		if victim < 0 {
			victim = i
		} else {
			via = i
		}
	}
	victimID := c.Replicas[victim].Cfg.ID
	// The leader asks the voters left whether they answer, at the
	// addresses they recorded: a forming cluster records them within a
	// moment.
	awaitServerRecords(t, c)
	if err := c.Client(via).RemovePeer(ctx, victimID, false); err != nil {
		t.Fatalf("remove peer %s: %v", victimID, err)
	}
	// The removed server, still running and not yet told, asking only to
	// bring its record up to date (as it does every second) is not added
	// back.
	vc := c.Replicas[victim].Cfg
	err = c.Replicas[now].Server.Join(ctx, api.JoinRequest{ID: victimID, RaftAddress: vc.RaftAdvertise, HTTPAddress: vc.HTTPAdvertise, UpdateOnly: true})
	if !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("a removed server updating its record: %v, want not found", err)
	}
	c.Stop(victim)
	conf, err = c.Client(via).RaftConfiguration(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(conf.Servers) != 2 {
		t.Fatalf("want 2 servers after removal, got %+v", conf.Servers)
	}
	for _, s := range conf.Servers {
		if s.ID == victimID {
			t.Fatalf("removed server still in configuration: %+v", conf)
		}
		if s.HTTPAddress == "" || !s.Voter {
			t.Fatalf("server entry incomplete: %+v", s)
		}
	}
	if err := c.Client(via).RemovePeer(ctx, "nope", false); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("removing an unknown peer: want 404, got %v", err)
	}
	// The remaining two still accept writes.
	submitN(t, c.Client(via), "two", 3)
}

// Test 6: a snapshot saved on one cluster restores on a fresh one.
func TestSnapshotSaveRestoreAcrossClusters(t *testing.T) {
	a := NewCluster(t, 3)
	acked := submitN(t, a.AllClient(), "a", 25)
	var buf bytes.Buffer
	if err := a.Client(a.Follower()).SnapshotSave(Ctx(t, 30*time.Second), &buf); err != nil {
		t.Fatalf("snapshot save: %v", err)
	}
	a.StopAll()

	b := NewCluster(t, 3)
	own := submitN(t, b.AllClient(), "b-only", 3)
	if err := b.Client(b.Follower()).SnapshotRestore(Ctx(t, 30*time.Second), bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatalf("snapshot restore: %v", err)
	}
	ctx := Ctx(t, 30*time.Second)
	for i := range b.Replicas {
		if !Eventually(20*time.Second, func() bool {
			list, _, err := b.Client(i).ListTasks(ctx, api.TaskQuery{Limit: 1000}, api.ReadOptions{})
			return err == nil && len(list.Tasks) == len(acked)
		}) {
			t.Fatalf("replica %d does not hold the restored tasks", i)
		}
		for _, a := range acked {
			if _, _, err := b.Client(i).GetTask(ctx, a.ID, api.ReadOptions{}); err != nil {
				t.Fatalf("restored task %s missing on replica %d: %v", a.ID, i, err)
			}
		}
		if _, _, err := b.Client(i).GetTask(ctx, own[0].ID, api.ReadOptions{}); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("state from before the restore should be gone, got %v", err)
		}
	}
	// The restored cluster keeps working and forwards to its own leader.
	b.WaitForLeader()
	submitN(t, b.Client(b.Follower()), "after-restore", 3)

	// A damaged archive is refused and changes nothing.
	bad := append([]byte(nil), buf.Bytes()...)
	bad = bad[:len(bad)/2]
	if err := b.AllClient().SnapshotRestore(ctx, bytes.NewReader(bad)); !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("truncated archive: want 400, got %v", err)
	}
}

// Test 8: the same idempotency key submitted concurrently through every
// replica yields exactly one task.
func TestConcurrentIdempotentSubmit(t *testing.T) {
	c := NewCluster(t, 3)
	ctx := Ctx(t, 30*time.Second)
	const perReplica = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ids     = map[string]int{}
		created int
	)
	for i := range c.Replicas {
		for j := 0; j < perReplica; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, isNew, err := c.Client(i).SubmitTask(ctx, echoSpec("same-key"))
				if err != nil {
					t.Errorf("submit via replica %d: %v", i, err)
					return
				}
				mu.Lock()
				ids[res.ID]++
				if isNew {
					created++
				}
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	if len(ids) != 1 || created != 1 {
		t.Fatalf("want one task created once, got ids %v, created %d times", ids, created)
	}
	list, _, err := c.AllClient().ListTasks(ctx, api.TaskQuery{}, api.ReadOptions{Consistent: true})
	if err != nil || len(list.Tasks) != 1 {
		t.Fatalf("want exactly one stored task, got %d (%v)", len(list.Tasks), err)
	}
}

// Reads say how fresh they are; ?consistent is served through the leader.
func TestReadFreshnessAndConsistentReads(t *testing.T) {
	c := NewCluster(t, 3)
	ctx := Ctx(t, 30*time.Second)
	f := c.Follower()
	res, _, err := c.Client(f).SubmitTask(ctx, echoSpec("fresh"))
	if err != nil {
		t.Fatal(err)
	}
	// A consistent read through a follower sees the acknowledged write at once.
	task, meta, err := c.Client(f).GetTask(ctx, res.ID, api.ReadOptions{Consistent: true})
	if err != nil || task.ID != res.ID || meta.Index < res.Index {
		t.Fatalf("consistent read: %+v %+v %v", task, meta, err)
	}
	if meta.LastContact != 0 {
		t.Fatalf("a consistent read is answered by the leader (last contact 0), got %v", meta.LastContact)
	}
	// Losing the quorum makes the survivor refuse writes and consistent
	// reads. The others crash: stopped, a leader would hand its
	// leadership to the survivor, which would then step down by itself.
	c.WaitApplied(res.Index)
	for i := range c.Replicas {
		if i != f {
			c.Crash(i)
		}
	}
	if !Eventually(20*time.Second, func() bool {
		_, _, err := c.Client(f).SubmitTask(ctx, echoSpec("no-quorum"))
		return errors.Is(err, api.ErrNoLeader)
	}) {
		t.Fatal("a replica without quorum should answer 503 to writes")
	}
	if _, _, err := c.Client(f).GetTask(ctx, res.ID, api.ReadOptions{Consistent: true}); !errors.Is(err, api.ErrNoLeader) {
		t.Fatalf("consistent read without quorum: want 503, got %v", err)
	}
	// A stale read still answers, and says it may be stale.
	if !Eventually(20*time.Second, func() bool {
		_, meta, err = c.Client(f).GetTask(ctx, res.ID, api.ReadOptions{})
		return err == nil && !meta.KnownLeader
	}) {
		t.Fatalf("stale read without leader: meta %+v err %v", meta, err)
	}
	if meta.LastContact < 250*time.Millisecond {
		t.Fatalf("a replica without leader must report how long ago it heard one, got %v", meta.LastContact)
	}
}

// A batch submit through a follower commits every task in one entry, is
// readable on every replica, and answers a retry with the same tasks.
func TestBatchSubmitIsOneEntryAndIdempotent(t *testing.T) {
	c := NewCluster(t, 3)
	cl := c.Client(c.Follower())
	ctx := Ctx(t, 30*time.Second)
	var specs []api.TaskSpec
	for i := 0; i < 50; i++ {
		specs = append(specs, echoSpec(fmt.Sprintf("batch-%d", i%40))) // ten keys repeat
	}
	res, err := cl.SubmitTasks(ctx, specs)
	if err != nil {
		t.Fatalf("batch submit: %v", err)
	}
	if len(res.Tasks) != len(specs) || res.Index == 0 {
		t.Fatalf("answer for %d specs: %d tasks at index %d", len(specs), len(res.Tasks), res.Index)
	}
	byKey := map[string]string{}
	created := 0
	for i, r := range res.Tasks {
		key := specs[i].IdempotencyKey
		if r.Created {
			created++
			byKey[key] = r.ID
		} else if byKey[key] != r.ID {
			t.Fatalf("tasks[%d] (key %s) answered %s, the first with that key is %s", i, key, r.ID, byKey[key])
		}
	}
	if created != 40 {
		t.Fatalf("%d tasks created from 40 distinct keys", created)
	}
	var acked []api.SubmitResponse
	for _, r := range res.Tasks {
		acked = append(acked, api.SubmitResponse{ID: r.ID, State: r.State, Index: res.Index})
	}
	requireTasks(t, c, acked)
	again, err := cl.SubmitTasks(ctx, specs)
	if err != nil {
		t.Fatalf("batch retry: %v", err)
	}
	for i, r := range again.Tasks {
		if r.Created || r.ID != byKey[specs[i].IdempotencyKey] {
			t.Fatalf("retry tasks[%d]: %+v, want the existing %s", i, r, byKey[specs[i].IdempotencyKey])
		}
	}
	list, _, err := c.AllClient().ListTasks(ctx, api.TaskQuery{Limit: api.MaxListLimit}, api.ReadOptions{Consistent: true})
	if err != nil || len(list.Tasks) != 40 {
		t.Fatalf("%d tasks listed after a batch and its retry (%v), want 40", len(list.Tasks), err)
	}
}
