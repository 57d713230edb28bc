package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"

	"herd/api"
	"herd/config"
	"herd/fsm"
	"herd/internal/httpapi"
)

// memReplica is a replica reduced to an FSM in memory: every proposal
// applies at once, as a committed entry would. It lets a test build one
// endpoint family without raft.
type memReplica struct {
	f      *fsm.FSM
	leader bool
	mu     sync.Mutex // one proposal applies at a time, as raft's applier does
	index  uint64
	now    time.Time
	kinds  []fsm.MessageType // each entry's command type, in order
}

func newMemReplica() *memReplica {
	return &memReplica{f: fsm.New(nil), leader: true, now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
}

func (m *memReplica) ID() string     { return "mem" }
func (m *memReplica) IsLeader() bool { return m.leader }
func (m *memReplica) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// advance moves the replica's clock on.
func (m *memReplica) advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = m.now.Add(d)
}
func (m *memReplica) State() *fsm.State { return m.f.State() }
func (m *memReplica) apply(ctx context.Context, t fsm.MessageType, payload any) (any, uint64, error) {
	b, err := fsm.Encode(t, payload)
	if err != nil {
		return nil, 0, err
	}
	return m.applyRaw(ctx, b)
}

func (m *memReplica) applyRaw(_ context.Context, b []byte) (any, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.index++
	m.kinds = append(m.kinds, fsm.MessageType(b[0]))
	resp := m.f.ApplyBytes(m.index, b)
	if err, ok := resp.(error); ok {
		return nil, m.index, fsmErr(err)
	}
	return resp, m.index, nil
}

func (m *memReplica) commitBatches(ctx context.Context, cmds [][]byte, batchSize int) []any {
	var out []any
	for start := 0; start < len(cmds); start += batchSize {
		resp, _, err := m.applyRaw(ctx, fsm.EncodeBatch(cmds[start:min(start+batchSize, len(cmds))]))
		res, _ := resp.(fsm.BatchResult)
		for i := start; i < min(start+batchSize, len(cmds)); i++ {
			if err != nil || i-start >= len(res) {
				out = append(out, nil)
				continue
			}
			out = append(out, res[i-start])
		}
	}
	return out
}

// registerNode commits a node of one slot that runs exec@1 tasks.
func (m *memReplica) registerNode(t *testing.T, id string) {
	t.Helper()
	if _, _, err := m.apply(context.Background(), fsm.MsgRegisterNode, fsm.RegisterNodeRequest{Now: m.Now(), Node: fsm.Node{
		ID: id, Capabilities: map[string][]string{"exec": {"1"}}, Resources: api.Resources{CPUMillis: 1000, MemoryMB: 1024}, Slots: 1,
	}}); err != nil {
		t.Fatal(err)
	}
}

// submitAndReserve submits a task through tasks and commits its first
// attempt's reservation on node, as the leader's pass would; it returns
// the task's id and the attempt's lease.
func (m *memReplica) submitAndReserve(t *testing.T, tasks taskEndpoints, node, attempt string) (string, uint64) {
	t.Helper()
	ctx := context.Background()
	task, _, _, err := tasks.SubmitTask(ctx, api.TaskSpec{Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	n, _ := m.State().Node(node)
	resp, _, err := m.applyRaw(ctx, fsm.EncodeReserve(fsm.ReserveRequest{TaskID: task.ID, AttemptID: attempt, Number: 1, NodeID: node,
		SessionGeneration: n.SessionGeneration, Now: m.Now(), HeartbeatTTL: time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	return task.ID, resp.(*fsm.ReserveResult).Attempt.LeaseVersion
}

func sizes() config.Scheduler {
	return config.Scheduler{SizeSmall: []string{"L1", "L2", "L3"}, SizeLarge: []string{"L1"}}
}

// The job family over a replica in memory: a job is normalized and its
// stage tasks' sizes resolved by the leader's settings, an invalid one
// names its field, and only a leader submits.
func TestJobEndpointsOverAFakeReplica(t *testing.T) {
	r := newMemReplica()
	jobs := jobEndpoints{r: r, sched: sizes()}
	ctx := context.Background()
	in := api.JobSpec{Name: "nightly", OnFailure: "fail", Stages: []api.StageSpec{
		{Name: "fetch", Outputs: []string{"raw"}, Task: api.TaskSpec{Command: []string{"true"}, Size: "large"}},
		{Name: "crunch", DependsOn: []string{"fetch"}, Inputs: []string{"fetch.raw"}, Task: api.TaskSpec{Command: []string{"true"}}},
	}}
	job, created, _, err := jobs.SubmitJob(ctx, in)
	if err != nil || !created || job.State != api.JobRunning || job.OnFailure != "" {
		t.Fatalf("submit: %+v, %v, %v", job, created, err)
	}
	stored, err := r.State().Job(job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if task := stored.Spec.Stages[0].Task; strings.Join(task.Tiers, ",") != "L1" || task.Name != "fetch" || task.Priority == nil {
		t.Fatalf("the stored stage task must be normalized with its size's tiers: %+v", task)
	}
	if got, err := jobs.GetJob(job.ID); err != nil || got.ID != job.ID || len(got.Stages) != 2 {
		t.Fatalf("get: %+v, %v", got, err)
	}
	if list, err := jobs.ListJobs("", 10); err != nil || len(list.Jobs) != 1 {
		t.Fatalf("list: %+v, %v", list, err)
	}
	in.Stages[1].DependsOn = nil
	if _, _, _, err := jobs.SubmitJob(ctx, in); !errors.Is(err, api.ErrBadRequest) || !strings.Contains(err.Error(), "stages[crunch].inputs") {
		t.Fatalf("an input from a stage not depended on: %v", err)
	}
	if cancelled, err := jobs.CancelJob(ctx, job.ID, "test"); err != nil || cancelled.State != api.JobCancelled {
		t.Fatalf("cancel: %+v, %v", cancelled, err)
	}
	r.leader = false
	if _, _, _, err := jobs.SubmitJob(ctx, in); !errors.Is(err, api.ErrNotLeader) {
		t.Fatalf("a follower must refuse: %v", err)
	}
}

// The task family over a replica in memory: one submit and a batch,
// reads, a refused spec naming its field, and a cancellation.
func TestTaskEndpointsOverAFakeReplica(t *testing.T) {
	r := newMemReplica()
	tasks := taskEndpoints{r: r, sched: sizes()}
	ctx := context.Background()
	one, created, _, err := tasks.SubmitTask(ctx, api.TaskSpec{Command: []string{"true"}, Size: "small"})
	if err != nil || !created || one.State != "PENDING" || one.Name != one.ID || strings.Join(one.Spec.Tiers, ",") != "L1,L2,L3" {
		t.Fatalf("submit: %+v, %v, %v", one, created, err)
	}
	batch, err := tasks.SubmitTasks(ctx, []api.TaskSpec{{Command: []string{"true"}, IdempotencyKey: "k"}, {Command: []string{"true"}, IdempotencyKey: "k"}})
	if err != nil || len(batch.Tasks) != 2 || !batch.Tasks[0].Created || batch.Tasks[1].Created || batch.Tasks[1].ID != batch.Tasks[0].ID {
		t.Fatalf("a batch with one key twice creates one task: %+v, %v", batch, err)
	}
	// Until every server records that it reads forms 3, a batch is an
	// entry of one submission per task; then one submit-many.
	if kind := r.kinds[len(r.kinds)-1]; kind != fsm.MsgBatch {
		t.Fatalf("with no server recorded, a batch was written as %s", kind)
	}
	if _, _, err := r.apply(ctx, fsm.MsgUpsertServer, fsm.UpsertServerRequest{Server: fsm.Server{ID: "mem", CommandForms: fsm.FormsSubmitMany}}); err != nil {
		t.Fatal(err)
	}
	again, err := tasks.SubmitTasks(ctx, []api.TaskSpec{{Command: []string{"true"}, IdempotencyKey: "k"}, {Command: []string{"true"}, IdempotencyKey: "k2"}})
	if err != nil || len(again.Tasks) != 2 || again.Tasks[0].Created || again.Tasks[0].ID != batch.Tasks[0].ID || !again.Tasks[1].Created {
		t.Fatalf("a batch with a known key and a new one: %+v, %v", again, err)
	}
	if kind := r.kinds[len(r.kinds)-1]; kind != fsm.MsgSubmitMany {
		t.Fatalf("with every server reading forms 3, a batch was written as %s", kind)
	}
	if list, err := tasks.ListTasks(api.TaskQuery{Limit: 10}); err != nil || len(list.Tasks) != 3 {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if _, _, _, err := tasks.SubmitTask(ctx, api.TaskSpec{Command: []string{"true"}, Resources: api.Resources{GPU: -1}}); !errors.Is(err, api.ErrBadRequest) || !strings.Contains(err.Error(), "resources.gpu") {
		t.Fatalf("a negative GPU: %v", err)
	}
	if cancelled, err := tasks.CancelTask(ctx, one.ID, "test"); err != nil || cancelled.State != "CANCELLED" {
		t.Fatalf("cancel: %+v, %v", cancelled, err)
	}
	if _, err := tasks.GetTask("ghost"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("a missing task: %v", err)
	}
}

// The node family over a replica in memory: drain and eligibility are
// committed and read back, with what the observer says of the node.
func TestNodeEndpointsOverAFakeReplica(t *testing.T) {
	r := newMemReplica()
	nodes := nodeEndpoints{r: r, profiles: config.DefaultProfiles(), observe: func(n *fsm.Node) api.NodeObservation {
		return api.NodeObservation{Misses: len(n.ID)}
	}}
	ctx := context.Background()
	r.registerNode(t, "edge-1")
	if n, err := nodes.DrainNode(ctx, "edge-1", true); err != nil || n.Management != "DRAINING" {
		t.Fatalf("drain: %+v, %v", n, err)
	}
	if n, err := nodes.SetNodeEligibility(ctx, "edge-1", false); err != nil || n.Scheduling != "INELIGIBLE" {
		t.Fatalf("eligibility: %+v, %v", n, err)
	}
	if n, err := nodes.GetNode("edge-1"); err != nil || n.Observation.Misses != len("edge-1") || n.Management != "DRAINING" {
		t.Fatalf("get: %+v, %v", n, err)
	}
	if list, err := nodes.ListNodes(); err != nil || len(list) != 1 {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if _, err := nodes.GetNode("ghost"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("a missing node: %v", err)
	}
	r.leader = false
	if _, err := nodes.DrainNode(ctx, "edge-1", false); !errors.Is(err, api.ErrNotLeader) {
		t.Fatalf("a follower must refuse: %v", err)
	}
}

// The node family's operator and agent reports (tier pins, health-check
// requests) commit over a replica in memory and answer with the node.
func TestNodeReportsOverAFakeReplica(t *testing.T) {
	r := newMemReplica()
	nodes := nodeEndpoints{r: r, profiles: config.DefaultProfiles(), observe: func(*fsm.Node) api.NodeObservation { return api.NodeObservation{} }}
	ctx := context.Background()
	r.registerNode(t, "edge-1")
	if n, err := nodes.SetNodeTier(ctx, "edge-1", api.NodeTierRequest{Tier: "L2"}); err != nil || !n.Tier.Pinned || n.Tier.Tier != "L2" {
		t.Fatalf("pin: %+v, %v", n.Tier, err)
	}
	if _, err := nodes.SetNodeTier(ctx, "edge-1", api.NodeTierRequest{Tier: "L9"}); !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("an unknown tier: %v", err)
	}
	if n, err := nodes.RequestHealthCheck(ctx, "edge-1"); err != nil || n.HealthCheck == nil || n.HealthCheck.Requested == 0 {
		t.Fatalf("health check: %+v, %v", n.HealthCheck, err)
	}
	r.leader = false
	if _, err := nodes.RequestRebench(ctx, "edge-1"); !errors.Is(err, api.ErrNotLeader) {
		t.Fatalf("a follower must refuse: %v", err)
	}
}

// The profile loop, built over a replica in memory, commits the leader's
// profile settings when the replicated ones differ.
func TestProfileLoopOverAFakeReplica(t *testing.T) {
	r := newMemReplica()
	profiles := config.DefaultProfiles()
	profiles.SlowRuns = 4 // not the default, which the state starts with
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loop := &profileLoop{r: r, profiles: profiles, sched: sizes(), logger: hclog.NewNullLogger()}
	stopped := make(chan struct{})
	go func() { defer close(stopped); loop.run(ctx) }()
	waitFor(t, "the profile settings to be committed", func() bool { return r.State().ProfileSettings() == profileSettings(profiles) })
	cancel()
	<-stopped
}

// memPass is a replica in memory as the schedule loop's passes read and
// commit through it; no node hibernates.
type memPass struct{ *memReplica }

func (memPass) Hibernating(string, time.Time, time.Time, time.Time) bool { return false }
func (memPass) Wake(string) error                                        { return nil }
func (m memPass) Commit(ctx context.Context, reserves []fsm.ReserveRequest, explains []fsm.ExplainRequest) int {
	cmds := make([][]byte, 0, len(reserves)+len(explains))
	for _, r := range reserves {
		cmds = append(cmds, fsm.EncodeReserve(r))
	}
	for _, e := range explains {
		b, err := fsm.Encode(fsm.MsgExplain, e)
		if err != nil {
			panic(err)
		}
		cmds = append(cmds, b)
	}
	placed := 0
	for _, res := range m.commitBatches(ctx, cmds, 64) {
		if _, ok := res.(*fsm.ReserveResult); ok {
			placed++
		}
	}
	return placed
}

// The schedule loop, built over a replica in memory, places a task on
// the one free slot and explains why the next one waits.
func TestScheduleLoopOverAFakeReplica(t *testing.T) {
	r := newMemReplica()
	tasks := taskEndpoints{r: r, sched: sizes()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.registerNode(t, "edge-1")
	first, _, _, err := tasks.SubmitTask(ctx, api.TaskSpec{Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.DefaultServer()
	stats := &SchedulerStats{}
	loop := &scheduleLoop{cfg: cfg.Scheduler, profiles: cfg.Profiles, wakeTimeout: cfg.Liveness.WakeTimeout,
		view: memPass{r}, out: memPass{r}, kick: make(chan struct{}), stats: stats, logger: hclog.NewNullLogger()}
	stopped := make(chan struct{})
	go func() { defer close(stopped); loop.run(ctx) }()
	waitFor(t, "the task to be placed", func() bool {
		got, err := tasks.GetTask(first.ID)
		return err == nil && got.State == "SCHEDULED" && len(got.Attempts) == 1 && got.Attempts[0].NodeID == "edge-1"
	})
	second, _, _, err := tasks.SubmitTask(ctx, api.TaskSpec{Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the waiting task to be explained", func() bool {
		got, err := tasks.GetTask(second.ID)
		return err == nil && got.State == "PENDING" && slices.ContainsFunc(got.Timeline, func(e api.TimelineEvent) bool { return e.Kind == "waiting" })
	})
	cancel()
	<-stopped
	if stats.Passes.Load() == 0 {
		t.Fatal("the loop's passes were not counted")
	}
}

// The liveness loop, built over a replica in memory, judges nobody
// during the leader's grace, then declares a node nobody hears SUSPECT
// and DOWN, reclaiming its attempt, while a node the leader hears stays
// READY and has its heartbeats committed in batches.
func TestLivenessLoopOverAFakeReplica(t *testing.T) {
	r := newMemReplica()
	tasks := taskEndpoints{r: r, sched: sizes()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	live := config.DefaultLiveness()
	live.HeartbeatInterval, live.SuspectAfter, live.DownAfter, live.LeaderGrace = 50*time.Millisecond, 2, 4, time.Second
	var since atomic.Int64
	since.Store(r.Now().UnixNano())
	sessions := &sessionEndpoints{r: r, monitor: newMonitor(live), liveness: live, keyring: &keyringEndpoints{r: r, seen: &keyringReports{}},
		leaderSince: &since, logger: hclog.NewNullLogger()}
	r.registerNode(t, "silent")
	r.registerNode(t, "heard")
	task, _ := r.submitAndReserve(t, tasks, "silent", "a1")
	heard, _ := r.State().Node("heard")
	seq := uint64(0)
	hear := func() time.Time { // the heard node's gossip heartbeat, now
		seq++
		now := r.Now()
		sessions.monitor.heartbeat(api.GossipHeartbeatMsg{Node: "heard", Session: heard.SessionGeneration, Seq: seq}, now)
		return now
	}
	synced := func(at time.Time) func() bool {
		return func() bool { n, _ := r.State().Node("heard"); return n.LastHeartbeat.Time().Equal(at) }
	}
	loop := &livenessLoop{r: r, sessions: sessions, cfg: live, batchSize: 16, logger: hclog.NewNullLogger()}
	stopped := make(chan struct{})
	go func() { defer close(stopped); loop.run(ctx) }()

	r.advance(6 * live.HeartbeatInterval) // past DownAfter, within the grace
	waitFor(t, "the heard node's heartbeat to be committed", synced(hear()))
	if n, _ := r.State().Node("silent"); n.Liveness != "READY" {
		t.Fatalf("judged during the leader's grace: %s", n.Liveness)
	}
	r.advance(time.Minute)
	at := hear()
	waitFor(t, "the silent node to be declared DOWN", func() bool { n, _ := r.State().Node("silent"); return n.Liveness == "DOWN" })
	waitFor(t, "the heard node's heartbeat to be committed", synced(at))
	if n, _ := r.State().Node("heard"); n.Liveness != "READY" {
		t.Fatalf("the heard node is %s", n.Liveness)
	}
	n, _ := r.State().Node("silent")
	if !slices.ContainsFunc(n.Events, func(e fsm.TimelineEvent) bool { return e.Kind == fsm.EventSuspect }) {
		t.Fatalf("DOWN without the suspicion first: %+v", n.Events)
	}
	got, err := tasks.GetTask(task)
	if err != nil || len(got.Attempts) != 1 || got.Attempts[0].State != "LOST" {
		t.Fatalf("the attempt on the DOWN node: %+v, %v", got.Attempts, err)
	}
	cancel()
	<-stopped
}

// The retention loop, built over a replica in memory, forgets a finished
// task once it is older than the retention, and leaves a pending one.
func TestRetentionLoopOverAFakeReplica(t *testing.T) {
	r := newMemReplica()
	tasks := taskEndpoints{r: r, sched: sizes()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done, _, _, err := tasks.SubmitTask(ctx, api.TaskSpec{Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tasks.CancelTask(ctx, done.ID, "finished"); err != nil {
		t.Fatal(err)
	}
	pending, _, _, err := tasks.SubmitTask(ctx, api.TaskSpec{Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	r.advance(time.Hour)
	loop := &retentionLoop{r: r, keep: 40 * time.Millisecond, logger: hclog.NewNullLogger()}
	stopped := make(chan struct{})
	go func() { defer close(stopped); loop.run(ctx) }()
	waitFor(t, "the finished task to be forgotten", func() bool { _, err := tasks.GetTask(done.ID); return errors.Is(err, api.ErrNotFound) })
	if _, err := tasks.GetTask(pending.ID); err != nil {
		t.Fatalf("a pending task must stay: %v", err)
	}
	cancel()
	<-stopped
}

// The cron loop, built over a replica in memory, fires a due slot of a
// scheduled job: a run starts.
func TestCronLoopOverAFakeReplica(t *testing.T) {
	r := newMemReplica()
	jobs := jobEndpoints{r: r, sched: sizes()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	job, _, _, err := jobs.SubmitJob(ctx, api.JobSpec{Name: "tick", Schedule: &api.Schedule{Cron: "@every 1m"},
		Stages: []api.StageSpec{{Name: "s", Task: api.TaskSpec{Command: []string{"true"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	loop := &cronLoop{r: r, logger: hclog.NewNullLogger()}
	stopped := make(chan struct{})
	go func() { defer close(stopped); loop.run(ctx) }()
	r.advance(61 * time.Second)
	waitFor(t, "the due slot to fire", func() bool { j, err := jobs.GetJob(job.ID); return err == nil && j.LastRun != "" })
	cancel()
	<-stopped
}

// The reclaim loop, built over a replica in memory, makes LOST an attempt
// reserved and never started within the timeout, and requeues its task.
func TestReclaimLoopOverAFakeReplica(t *testing.T) {
	r := newMemReplica()
	tasks := taskEndpoints{r: r, sched: sizes()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.registerNode(t, "edge-1")
	task, _, _, err := tasks.SubmitTask(ctx, api.TaskSpec{Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	n, _ := r.State().Node("edge-1")
	if _, _, err := r.applyRaw(ctx, fsm.EncodeReserve(fsm.ReserveRequest{TaskID: task.ID, AttemptID: "a1", Number: 1, NodeID: "edge-1",
		SessionGeneration: n.SessionGeneration, Now: r.Now(), HeartbeatTTL: time.Hour})); err != nil {
		t.Fatal(err)
	}
	r.advance(time.Minute)
	loop := &reclaimLoop{r: r, timeout: 40 * time.Millisecond, batchSize: 16, logger: hclog.NewNullLogger()}
	stopped := make(chan struct{})
	go func() { defer close(stopped); loop.run(ctx) }()
	waitFor(t, "the attempt to be reclaimed", func() bool {
		got, err := tasks.GetTask(task.ID)
		return err == nil && got.State == "PENDING" && len(got.Attempts) == 1 && got.Attempts[0].State == "LOST"
	})
	cancel()
	<-stopped
}

// The ACL family over a replica in memory: one bootstrap, tokens made,
// found by their secret's hash, listed and deleted, and a node's refused
// requests recorded at most once a second, the next record counting the
// rest.
func TestACLEndpointsOverAFakeReplica(t *testing.T) {
	r := newMemReplica()
	acl := aclEndpoints{r: r, enforced: true, refusals: &refusalLimiter{}}
	ctx := context.Background()
	boot, err := acl.BootstrapACL(ctx)
	if err != nil || boot.SecretID == "" || !slices.Contains(boot.Policies, "management") {
		t.Fatalf("bootstrap: %+v, %v", boot, err)
	}
	if _, err := acl.BootstrapACL(ctx); err == nil {
		t.Fatal("a second bootstrap must be refused")
	}
	tok, err := acl.CreateToken(ctx, api.ACLTokenRequest{Name: "edge", NodeID: "edge-1"})
	if err != nil || !slices.Equal(tok.Policies, []string{"agent"}) {
		t.Fatalf("a node's token: %+v, %v", tok, err)
	}
	if found, ok := acl.TokenBySecretHash(httpapi.HashSecret(tok.SecretID)); !ok || found.AccessorID != tok.AccessorID || found.SecretID != "" {
		t.Fatalf("by its secret: %+v %v", found, ok)
	}
	if _, err := acl.CreateToken(ctx, api.ACLTokenRequest{Submitters: []string{"bad id"}}); !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("a bad submitter: %v", err)
	}
	if list, _ := acl.ListTokens(); len(list) != 2 {
		t.Fatalf("tokens: %+v", list)
	}
	for range 3 {
		if err := acl.Audit(ctx, api.AuditEntry{Actor: "edge-1", Action: "refused", NodeID: "edge-1", Outcome: "denied"}); err != nil {
			t.Fatal(err)
		}
	}
	r.advance(2 * time.Second)
	if err := acl.Audit(ctx, api.AuditEntry{Actor: "edge-1", Action: "refused", NodeID: "edge-1", Outcome: "denied"}); err != nil {
		t.Fatal(err)
	}
	log, _ := acl.AuditLog(0, 100)
	if len(log) != 2 || log[0].Outcome != "denied" || log[1].Outcome != "denied (and 2 more refused requests of this node since its last record)" {
		t.Fatalf("a node's refusals, at most one record a second: %+v", log)
	}
	if err := acl.DeleteToken(ctx, tok.AccessorID); err != nil {
		t.Fatal(err)
	}
	if _, ok := acl.TokenBySecretHash(httpapi.HashSecret(tok.SecretID)); ok {
		t.Fatal("a deleted token is still found")
	}
}

// The attempt family over a replica in memory (no metrics): the agent's
// assignment lists the reserved attempt, its start and end commit, a
// stale lease is refused, and the task ends SUCCEEDED.
func TestAttemptEndpointsOverAFakeReplica(t *testing.T) {
	r := newMemReplica()
	tasks := taskEndpoints{r: r, sched: sizes()}
	attempts := attemptEndpoints{r: r, sched: config.DefaultScheduler()}
	ctx := context.Background()
	r.registerNode(t, "edge-1")
	taskID, lease := r.submitAndReserve(t, tasks, "edge-1", "a1")
	as, err := attempts.Assignments(ctx, "edge-1", api.AssignmentsQuery{})
	if err != nil || len(as.Attempts) != 1 || as.Attempts[0].Attempt.ID != "a1" {
		t.Fatalf("assignments: %+v, %v", as, err)
	}
	if _, err := attempts.StartAttempt(ctx, "a1", api.AttemptStartRequest{LeaseVersion: lease + 1}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("a start with a stale lease: %v", err)
	}
	if rep, err := attempts.StartAttempt(ctx, "a1", api.AttemptStartRequest{LeaseVersion: lease}); err != nil || rep.Attempt.State != "RUNNING" {
		t.Fatalf("start: %+v, %v", rep, err)
	}
	r.advance(time.Second)
	if rep, err := attempts.CompleteAttempt(ctx, "a1", api.AttemptCompleteRequest{LeaseVersion: lease, RanMs: 900}); err != nil || rep.Attempt.State != "SUCCEEDED" {
		t.Fatalf("end: %+v, %v", rep, err)
	}
	if got, _ := tasks.GetTask(taskID); got.State != "SUCCEEDED" {
		t.Fatalf("the task: %+v", got)
	}
}

// A result whose start was never reported commits as one attempt-run
// command once every server in the server table reads forms 2, and as a
// start and an end while any server reads only the first release's
// forms (a rolling upgrade under way): the task ends SUCCEEDED either
// way, with its start dated by the agent's measure of the run.
func TestAReportedRunIsOneCommandOnceEveryServerReadsIt(t *testing.T) {
	for _, c := range []struct {
		name  string
		forms []int
		want  map[string]uint64
	}{
		{"every server reads forms 2", []int{2, 2, 2}, map[string]uint64{"attempt-run": 1}},
		{"one server reads forms 1", []int{2, 1, 2}, map[string]uint64{"attempt-start": 1, "attempt-end": 1}},
		{"no server recorded yet", nil, map[string]uint64{"attempt-start": 1, "attempt-end": 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newMemReplica()
			tasks := taskEndpoints{r: r, sched: sizes()}
			attempts := attemptEndpoints{r: r, sched: config.DefaultScheduler()}
			ctx := context.Background()
			for i, forms := range c.forms {
				if _, _, err := r.apply(ctx, fsm.MsgUpsertServer, fsm.UpsertServerRequest{Server: fsm.Server{ID: string(rune('a' + i)), CommandForms: forms}}); err != nil {
					t.Fatal(err)
				}
			}
			r.registerNode(t, "edge-1")
			_, lease := r.submitAndReserve(t, tasks, "edge-1", "a1")
			r.advance(time.Second)
			before := r.f.AppliedCommands()
			out, err := attempts.ReportAttempts(ctx, []api.AttemptReportItem{{AttemptID: "a1",
				Complete: &api.AttemptCompleteRequest{LeaseVersion: lease, RanMs: 200, StartUnreported: true}}})
			if err != nil || out[0].Err != nil || out[0].Report.Attempt.State != "SUCCEEDED" {
				t.Fatalf("report: %+v, %v", out, err)
			}
			after := r.f.AppliedCommands()
			for name, n := range after {
				if d := n - before[name]; d != c.want[name] {
					t.Errorf("%s: %d commands applied, want %d", name, d, c.want[name])
				}
			}
			a, err := r.State().Attempt("a1")
			if err != nil || a.FinishedAt.Time().Sub(a.StartedAt.Time()) != 200*time.Millisecond {
				t.Fatalf("the attempt ran from %v to %v (%v), want 200ms", a.StartedAt, a.FinishedAt, err)
			}
		})
	}
}

// The agent family over a replica in memory and a fake agent: a node's
// image cache, a pull and an import reach the address the node
// registered, with their bodies; the agent's refusal of the request is
// the caller's bad request, an unknown node is not found, and a node that
// serves no data port is a conflict saying so.
func TestAgentEndpointsOverAFakeReplicaAndAgent(t *testing.T) {
	var got []string
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.RequestURI()+" "+string(body))
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/images":
			_, _ = w.Write([]byte(`{"runtime":"runc 1.1.5","images":[]}`))
		case strings.Contains(string(body), `"bad:1"`):
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"not an image archive: bad"}`))
		default:
			_, _ = w.Write([]byte(`{"images":[{"node":"edge-1","names":["tools:1"],"digest":"sha256:ab"}]}`))
		}
	}))
	t.Cleanup(agent.Close)
	r := newMemReplica()
	ctx := context.Background()
	for id, addr := range map[string]string{"edge-1": strings.TrimPrefix(agent.URL, "http://"), "old-1": ""} {
		if _, _, err := r.apply(ctx, fsm.MsgRegisterNode, fsm.RegisterNodeRequest{Now: r.Now(), Node: fsm.Node{ID: id, DataAddress: addr,
			Capabilities: map[string][]string{"exec": {"1"}}, Resources: api.Resources{CPUMillis: 1000, MemoryMB: 1024}, Slots: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	e := agentEndpoints{r: r}
	if ic, err := e.NodeImages(ctx, "edge-1"); err != nil || ic.Runtime != "runc 1.1.5" {
		t.Fatalf("node images: %+v, %v", ic, err)
	}
	if l, err := e.PullImage(ctx, "edge-1", "tools:1"); err != nil || len(l.Images) != 1 || l.Images[0].Digest != "sha256:ab" {
		t.Fatalf("pull: %+v, %v", l, err)
	}
	if _, err := e.ImportImage(ctx, "edge-1", strings.NewReader("ARCHIVE"), []string{"a:1"}); err != nil {
		t.Fatalf("import: %v", err)
	}
	want := []string{"GET /v1/images ", `POST /v1/images/pull {"ref":"tools:1"}`, "POST /v1/images/import?tag=a%3A1 ARCHIVE"}
	if !slices.Equal(got, want) {
		t.Fatalf("the agent was asked %q, want %q", got, want)
	}
	if _, err := e.PullImage(ctx, "edge-1", "bad:1"); !errors.Is(err, api.ErrBadRequest) || !strings.Contains(err.Error(), "not an image archive") {
		t.Fatalf("a request the agent refuses: %v", err)
	}
	if _, err := e.NodeImages(ctx, "ghost"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("an unknown node: %v", err)
	}
	if _, err := e.NodeImages(ctx, "old-1"); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "serves no data port") {
		t.Fatalf("a node without a data port: %v", err)
	}
}

// The keyring family over a replica in memory and a gossip keyring of
// its own: it answers the keys the members run before any rotation, an
// installed key is committed and applied to the local keyring, a node's
// agent is behind until it reports the new keyring, and the mistakes are
// refused: no encryption, a key not base64, a follower asked to change.
func TestKeyringEndpointsOverAFakeReplica(t *testing.T) {
	r := newMemReplica()
	ctx := context.Background()
	r.registerNode(t, "edge-1")
	none := keyringEndpoints{r: r, seen: &keyringReports{}, logger: hclog.NewNullLogger()}
	if _, err := none.GossipKeyring(); !errors.Is(err, api.ErrBadRequest) || !strings.Contains(err.Error(), "not encrypted") {
		t.Fatalf("without a keyring: %v", err)
	}
	first, second := bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 16)
	kr, err := memberlist.NewKeyring(nil, first)
	if err != nil {
		t.Fatal(err)
	}
	e := keyringEndpoints{r: r, gossip: &serverGossip{keyring: kr}, seen: &keyringReports{}, logger: hclog.NewNullLogger()}
	b64 := base64.StdEncoding.EncodeToString
	if got, err := e.GossipKeyring(); err != nil || got.Index != 0 || got.Primary != b64(first) || got.NodesCurrent != 1 {
		t.Fatalf("before any rotation: %+v, %v", got, err)
	}
	got, err := e.ChangeGossipKeyring(ctx, api.GossipKeyringRequest{Op: "install", Key: b64(second)})
	if err != nil || got.Index == 0 || len(got.Keys) != 2 || got.Primary != b64(first) || !slices.Equal(got.NodesBehind, []string{"edge-1"}) {
		t.Fatalf("install: %+v, %v", got, err)
	}
	if len(kr.GetKeys()) != 2 {
		t.Fatalf("the local keyring holds %d keys after the install", len(kr.GetKeys()))
	}
	e.seen.report("edge-1", got.Index)
	if got, err := e.GossipKeyring(); err != nil || got.NodesCurrent != 1 || len(got.NodesBehind) != 0 {
		t.Fatalf("after the agent's report: %+v, %v", got, err)
	}
	if _, err := e.ChangeGossipKeyring(ctx, api.GossipKeyringRequest{Op: "use", Key: "not base64!"}); !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("a key not base64: %v", err)
	}
	r.leader = false
	if _, err := e.ChangeGossipKeyring(ctx, api.GossipKeyringRequest{Op: "use", Key: b64(second)}); !errors.Is(err, api.ErrNotLeader) {
		t.Fatalf("on a follower: %v", err)
	}
}

// The session family over a replica in memory: a registration starts a
// session and gives a lease, a heartbeat of it is committed (this
// replica hears no gossip) and answers the keyring's index while one of
// an old session is refused, the agent's conditions are committed, and a
// DOWN verdict reclaims the node's live attempt and requeues its task
// no earlier than the lease the agent may hold.
func TestSessionEndpointsOverAFakeReplica(t *testing.T) {
	r := newMemReplica()
	ctx := context.Background()
	live := config.DefaultLiveness()
	var since atomic.Int64
	since.Store(r.Now().UnixNano())
	e := sessionEndpoints{r: r, monitor: newMonitor(live), liveness: live, keyring: &keyringEndpoints{r: r, seen: &keyringReports{}},
		leaderSince: &since, logger: hclog.NewNullLogger()}
	reg, err := e.RegisterNode(ctx, api.NodeRegistration{NodeSpec: api.NodeSpec{ID: "edge-1", Slots: 1,
		Capabilities: map[string][]string{"exec": {"1"}}, Resources: api.Resources{CPUMillis: 1000, MemoryMB: 1024}}})
	if err != nil || reg.SessionGeneration == 0 || reg.LeaseMs <= 0 {
		t.Fatalf("register: %+v, %v", reg, err)
	}
	r.advance(time.Second)
	hb, err := e.Heartbeat(ctx, "edge-1", api.HeartbeatRequest{SessionGeneration: reg.SessionGeneration, KeyringIndex: 0})
	if err != nil || hb.Liveness != "READY" || hb.LeaseMs <= 0 {
		t.Fatalf("heartbeat: %+v, %v", hb, err)
	}
	if n, _ := r.State().Node("edge-1"); !n.LastHeartbeat.Time().Equal(r.Now()) {
		t.Fatalf("the heartbeat was not committed: last heartbeat %v, now %v", n.LastHeartbeat, r.Now())
	}
	if _, err := e.Heartbeat(ctx, "edge-1", api.HeartbeatRequest{SessionGeneration: reg.SessionGeneration + 1}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("a heartbeat of another session: %v", err)
	}
	n, err := e.SetNodeConditions(ctx, "edge-1", api.NodeConditionsRequest{SessionGeneration: reg.SessionGeneration,
		Conditions: []api.NodeCondition{{Type: "disk_full", Message: "2 MiB free"}}})
	if err != nil || len(n.Conditions) != 1 || n.Conditions[0].Type != "disk_full" {
		t.Fatalf("conditions: %+v, %v", n, err)
	}
	if _, err := e.SetNodeConditions(ctx, "edge-1", api.NodeConditionsRequest{SessionGeneration: reg.SessionGeneration}); err != nil {
		t.Fatal(err)
	}
	tasks := taskEndpoints{r: r, sched: sizes()}
	task, _, _, err := tasks.SubmitTask(ctx, api.TaskSpec{Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.applyRaw(ctx, fsm.EncodeReserve(fsm.ReserveRequest{TaskID: task.ID, AttemptID: "a1", Number: 1, NodeID: "edge-1",
		SessionGeneration: reg.SessionGeneration, Now: r.Now(), HeartbeatTTL: time.Hour})); err != nil {
		t.Fatal(err)
	}
	reclaimed, err := e.DeclareNodeDown(ctx, "edge-1", "gone")
	if err != nil || !slices.Equal(reclaimed, []string{"a1"}) {
		t.Fatalf("down: %v, %v", reclaimed, err)
	}
	got, _ := r.State().Task(task.ID)
	if got.State != fsm.TaskPending || !got.NotBefore().Time().After(r.Now()) {
		t.Fatalf("the task after its node went down: %s, retry at %v (now %v)", got.State, got.NotBefore(), r.Now())
	}
	r.leader = false
	if _, err := e.RegisterNode(ctx, api.NodeRegistration{NodeSpec: api.NodeSpec{ID: "edge-2", Slots: 1}}); !errors.Is(err, api.ErrNotLeader) {
		t.Fatalf("a registration on a follower: %v", err)
	}
}
