package cluster

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"herd/config"
	"herd/fsm"
	"herd/scheduler"
)

// SchedulerStats are the scheduling loop's counters, served by
// GET /v1/operator/scheduler. Counters only grow; gauges reflect the
// latest pass.
type SchedulerStats struct {
	Passes       atomic.Uint64
	Scanned      atomic.Uint64 // waiting tasks the passes looked at
	Placements   atomic.Uint64
	Entries      atomic.Uint64 // Raft entries carrying placements
	QueueDepth   atomic.Int64  // pending tasks at the last pass
	OldestWaitMs atomic.Int64  // longest a pending task had waited at the last pass

	mu         sync.Mutex
	rejections map[string]uint64
}

func (s *SchedulerStats) reject(code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rejections == nil {
		s.rejections = map[string]uint64{}
	}
	s.rejections[code]++
}

// Rejections returns placements refused at apply time, by reason code.
func (s *SchedulerStats) Rejections() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.rejections)
}

// SchedulerStats returns this replica's scheduling counters (they move
// only while it leads).
func (s *Server) SchedulerStats() *SchedulerStats { return &s.schedStats }

type randSource interface{ rand() *rand.Rand }

type seededRand struct{ r *rand.Rand }

func (s seededRand) rand() *rand.Rand { return s.r }

// scheduleLoop is the leader's placement loop: it looks at the committed
// state, decides placements in queue order against a working copy of the
// nodes (so one pass never overbooks a node itself), commits them in
// batches, and waits for the state to change. The FSM re-checks every
// placement, so a decision from a view that went stale is rejected, never
// applied twice.
func (s *Server) scheduleLoop(ctx context.Context) {
	// Weighted-random choice, when configured, draws from a source seeded
	// by the term and server id, logged so a run can be replayed.
	var rng randSource
	if s.cfg.Scheduler.RandomTopK > 1 {
		h := fnv.New64a()
		h.Write([]byte(s.cfg.ID))
		term := s.raft.CurrentTerm()
		rng = seededRand{rand.New(rand.NewPCG(term, h.Sum64()))}
		s.logger.Info("weighted-random placement seeded", "term", term, "server", s.cfg.ID)
	}
	cfg := s.cfg.Scheduler
	ps := &passState{
		rng:       rng,
		queue:     newLeaderQueue(scheduler.QueueConfig{AgingGrace: cfg.AgingGrace, AgingInterval: cfg.AgingInterval, AgingCap: cfg.AgingCap, FailurePenalty: cfg.FailurePenalty}),
		explained: map[string]time.Time{},
		sleepers:  &wakeTracker{requested: map[string]time.Time{}, lastSent: map[string]time.Time{}, passedOver: map[string]map[string]string{}},
		fl:        newInflight(),
	}
	fl := ps.fl
	defer ps.commits.Wait()
	for ctx.Err() == nil {
		ws := fsm.NewWatchSet()
		passStart := time.Now()
		decided, wake := s.schedulePass(ctx, ws, ps)
		passTook := time.Since(passStart)
		passes, futile, changed := fl.state()
		if decided > 0 && !futile {
			// Pipeline: decide the next pass while this one commits, but
			// never more than maxPassesInFlight at once.
			for passes >= maxPassesInFlight && ctx.Err() == nil {
				select {
				case <-ctx.Done():
				case <-changed:
				}
				passes, _, changed = fl.state()
			}
			continue
		}
		wait := time.Second
		if !wake.IsZero() {
			// wake is on the leader's clock, as every time a pass reads.
			wait = min(wait, max(wake.Sub(s.now()), time.Millisecond))
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		go func() {
			select {
			case <-s.monitor.kick: // a hibernating node woke up
				cancel()
			case <-changed: // a commit ended: its rejections may free capacity
				if passes > 0 {
					cancel()
				}
			case <-wctx.Done():
			}
		}()
		_ = ws.WatchCtx(wctx)
		cancel()
		// Coalesce bursts of changes (many submits, heartbeats) into one
		// pass: 5 ms, since it adds to an idle cluster's start latency, or
		// as long as the pass took, so that a deep backlog nothing can
		// take does not keep the leader re-reading it on every submit.
		select {
		case <-ctx.Done():
		case <-time.After(max(5*time.Millisecond, passTook)):
		}
	}
}

// maxExplainsPerPass bounds how many waiting tasks one pass explains
// (each explanation checks every node against the task).
const maxExplainsPerPass = 64

// wakeTracker remembers, for the leader's term, which hibernating nodes
// it woke and when, and which nodes it passed over for which task.
type wakeTracker struct {
	requested  map[string]time.Time         // node → when the wake was first sent
	lastSent   map[string]time.Time         // node → last wake message
	passedOver map[string]map[string]string // task → node → why
}

// passState is what the leader's passes keep from one to the next.
type passState struct {
	rng       randSource
	queue     *leaderQueue
	explained map[string]time.Time // task → when its wait was last explained
	sleepers  *wakeTracker
	fl        *inflight // placements proposed and not yet answered
	commits   sync.WaitGroup
	// explainScanAfter is when a pass that finds every slot taken next
	// looks over the waiting tasks for explanations to record. Without it
	// every pass of a full cluster (one per finished attempt) walked up to
	// MaxPassPlacements waiting tasks only to find them explained lately:
	// a tenth of the CPU of a saturated end-to-end run.
	explainScanAfter time.Time
}

// explainScanInterval is how often a full cluster's waiting tasks are
// looked over for explanations due; a task that starts waiting is
// explained within it.
func explainScanInterval(cfg config.Scheduler) time.Duration {
	return min(cfg.ExplainInterval, time.Second)
}

// forget drops what was noted about a task that left the pending set.
func (ps *passState) forget(id string) {
	delete(ps.explained, id)
	delete(ps.sleepers.passedOver, id)
}

// schedulePass runs one pass, hands its placements to Raft (committed in
// the background, tracked in ps.fl until the FSM answers) and returns how
// many it decided and when the earliest backing-off task becomes due.
func (s *Server) schedulePass(ctx context.Context, ws fsm.WatchSet, ps *passState) (int, time.Time) {
	cfg := s.cfg.Scheduler
	explained, sleepers, fl, rng := ps.explained, ps.sleepers, ps.fl, ps.rng
	// In-flight placements are read before the view (see inflight).
	flTasks, flNodes := fl.snapshot()
	st := s.fsm.State()
	now := s.now().UTC()
	s.schedStats.Passes.Add(1)
	st.WatchPending(ws)
	if err := st.WatchNodes(ws); err != nil {
		s.logger.Error("watch nodes", "error", err)
	}
	rebuilt, err := ps.queue.sync(st, ps.forget)
	if err != nil {
		s.logger.Error("sync the pending queue", "error", err)
		return 0, time.Time{}
	}
	queue := ps.queue.q
	if rebuilt {
		for id := range explained {
			if !queue.Has(id) {
				ps.forget(id)
			}
		}
		for id := range sleepers.passedOver {
			if !queue.Has(id) {
				ps.forget(id)
			}
		}
	}
	s.schedStats.QueueDepth.Store(int64(queue.Len()))
	if oldest := queue.OldestQueuedAt(); !oldest.IsZero() {
		s.schedStats.OldestWaitMs.Store(max(now.Sub(oldest), 0).Milliseconds())
	} else {
		s.schedStats.OldestWaitMs.Store(0)
	}
	// The pass reads the queue in order only as far as it gets: placing
	// until the slots are full, then only explaining why tasks wait.
	order := queue.Iter(now)
	wake := queue.NextDue()
	if queue.Len() == 0 {
		return 0, wake
	}
	nodes, nodeByID, err := nodeViews(st)
	if err != nil {
		s.logger.Error("list nodes", "error", err)
		return 0, wake
	}
	sessions := map[string]uint64{}
	for _, n := range nodes {
		rec := nodeByID(n.ID)
		sessions[n.ID] = rec.SessionGeneration
		_, _, n.Hibernating = s.monitor.view(n.ID, rec.LastHeartbeat.Time(), rec.SessionStartedAt.Time(), now)
		if b, ok := flNodes[n.ID]; ok {
			n.Reserved = n.Reserved.Add(b.resources)
			n.RunningAttempts += b.attempts
		}
		if !n.Hibernating {
			delete(sleepers.requested, n.ID)
		}
	}
	// Free slots on nodes that could take work: when none is left, the
	// pass stops instead of trying (and ordering) the rest of the backlog.
	// Counting too many only costs time; never too few.
	free := 0
	for _, n := range nodes {
		if n.Management == scheduler.ManagementActive && n.Scheduling == scheduler.SchedulingEligible && n.Liveness != scheduler.LivenessDown {
			free += max(n.Slots-n.RunningAttempts, 0)
		}
	}
	scoring := scoringConfig(cfg, rng)
	// Tasks with the same requirements share one ranking of the nodes for
	// the pass, kept current as the pass books nodes.
	placer := scheduler.NewPlacer(nodes, &scoring)

	var (
		cmds      [][]byte
		proposals []proposal
		explains  [][]byte
		explainN  int
		decisions int
		// explainScan: the pass looked over waiting tasks for
		// explanations with every slot taken.
		explainScan bool
	)
	scanned := 0
	for decisions < cfg.MaxPassPlacements {
		next, ok := order.Next()
		if !ok {
			break
		}
		if _, proposed := flTasks[next.ID]; proposed {
			continue // its placement is still in flight
		}
		scanned++
		full := free <= 0
		if full {
			// Every slot is taken: only explanations are left to do, for
			// tasks not explained lately, within as many tasks as a pass
			// may place, and at most every explainScanInterval.
			if now.Before(ps.explainScanAfter) {
				wake = earliest(wake, ps.explainScanAfter)
				break
			}
			explainScan = true
			if explainN >= maxExplainsPerPass || scanned > cfg.MaxPassPlacements {
				break
			}
			if now.Sub(explained[next.ID]) < cfg.ExplainInterval {
				continue
			}
		}
		// The queue holds each task's record as of st (every change to
		// a pending task is in the pending feed it was synced from).
		t, ok := next.Ref.(*fsm.Task)
		if !ok {
			continue // the queue only holds records: cannot happen
		}
		req := t.Request(now, cfg.HeartbeatTTL)
		req.Blacklist = t.Blacklist(nodeByID)
		req.PassedOver = sleepers.passedOver[t.ID]
		var cand scheduler.Candidate
		err = scheduler.ErrNoEligibleNode // every slot taken: only explain
		if !full {
			cand, err = placer.Select(&req)
		}
		if err == nil && cand.Node.Hibernating {
			// The best node sleeps: wake it and place the task once it
			// advertises it is awake; if it does not wake in time, pass it
			// over for this task and choose again.
			id := cand.Node.ID
			first, asked := sleepers.requested[id]
			if !asked {
				first = now
				sleepers.requested[id] = now
			}
			if now.Sub(first) < s.cfg.Liveness.WakeTimeout {
				if now.Sub(sleepers.lastSent[id]) >= time.Second {
					sleepers.lastSent[id] = now
					if werr := s.wake(id); werr != nil {
						s.logger.Warn("could not wake node", "node", id, "error", werr)
					} else {
						s.logger.Info("waking hibernating node for a task", "node", id, "task", t.ID)
					}
				}
				wake = earliest(wake, first.Add(s.cfg.Liveness.WakeTimeout))
				continue
			}
			if sleepers.passedOver[t.ID] == nil {
				sleepers.passedOver[t.ID] = map[string]string{}
			}
			sleepers.passedOver[t.ID][id] = fmt.Sprintf("hibernating, did not wake within %s", s.cfg.Liveness.WakeTimeout)
			s.logger.Warn("passing over a node that did not wake", "node", id, "task", t.ID)
			req.PassedOver = sleepers.passedOver[t.ID]
			cand, err = placer.Select(&req)
			if err == nil && cand.Node.Hibernating {
				continue // the next best sleeps too: it gets woken next pass
			}
		}
		if errors.Is(err, scheduler.ErrNoEligibleNode) {
			// Record why it waits, at most every ExplainInterval per task
			// and only when the reason changed.
			if explainN < maxExplainsPerPass && now.Sub(explained[t.ID]) >= cfg.ExplainInterval {
				explainN++
				explained[t.ID] = now
				summary := placer.Summarize(&req)
				if summary != t.LastExplain {
					if b, err := s.encode(fsm.MsgExplain, fsm.ExplainRequest{TaskID: t.ID, Summary: summary, Now: now}); err == nil {
						explains = append(explains, b)
					}
				}
			}
			continue
		}
		if err != nil {
			s.logger.Error("select", "task", t.ID, "error", err)
			continue
		}
		b, encErr := s.encodeReserve(fsm.ReserveRequest{
			TaskID: t.ID, AttemptID: newID(now), Number: int(t.Attempts) + 1, NodeID: cand.Node.ID,
			SessionGeneration: sessions[cand.Node.ID], Score: cand.Score, Now: now, HeartbeatTTL: cfg.HeartbeatTTL,
		})
		if encErr != nil {
			s.logger.Error("encode reservation", "task", t.ID, "error", encErr)
			continue
		}
		cmds = append(cmds, b)
		proposals = append(proposals, proposal{taskID: t.ID, nodeID: cand.Node.ID, resources: t.Spec.Resources})
		decisions++
		// Book it in the working copy so later tasks of this pass see it.
		placer.Book(cand.Node, t.Spec.Resources)
		free--
	}
	s.schedStats.Scanned.Add(uint64(scanned))
	if explainScan && explainN < maxExplainsPerPass {
		// Every task looked at was explained lately or is now; had the
		// pass stopped at maxExplainsPerPass, the next one goes on.
		ps.explainScanAfter = now.Add(explainScanInterval(cfg))
	}
	if len(cmds) == 0 && len(explains) == 0 {
		return 0, wake
	}
	fl.add(proposals)
	ps.commits.Add(1)
	go func() {
		defer ps.commits.Done()
		accepted := s.commitPlacements(ctx, cmds, cfg.BatchSize)
		if len(explains) > 0 {
			s.commitBatches(ctx, explains, cfg.BatchSize)
		}
		fl.done(proposals, accepted)
	}()
	return decisions, wake
}

// commitPlacements proposes the reservations in entries of up to
// batchSize, all in flight at once (raft pipelines and group-commits
// them), and counts what the FSM accepted and rejected.
func (s *Server) commitPlacements(ctx context.Context, cmds [][]byte, batchSize int) int {
	placed := 0
	for _, resp := range s.commitBatches(ctx, cmds, batchSize) {
		switch r := resp.(type) {
		case *fsm.ReserveResult:
			placed++
		case *fsm.Rejection:
			s.schedStats.reject(r.Code)
		case error:
			s.schedStats.reject("error")
		}
	}
	s.schedStats.Placements.Add(uint64(placed))
	return placed
}

// commitBatches applies commands in batch entries and returns every
// command's response in order (nil responses for entries that failed).
func (s *Server) commitBatches(ctx context.Context, cmds [][]byte, batchSize int) []any {
	if len(cmds) == 0 {
		return nil
	}
	var futures []raft.ApplyFuture
	var sizes []int
	for start := 0; start < len(cmds); start += batchSize {
		end := min(start+batchSize, len(cmds))
		futures = append(futures, s.raft.Apply(fsm.EncodeBatch(cmds[start:end]), s.cfg.Raft.ApplyTimeout))
		sizes = append(sizes, end-start)
	}
	out := make([]any, 0, len(cmds))
	for i, f := range futures {
		if err := s.await(ctx, f); err != nil {
			if ctx.Err() == nil {
				s.logger.Warn("placement batch not committed", "commands", sizes[i], "error", err)
			}
			for j := 0; j < sizes[i]; j++ {
				out = append(out, nil)
			}
			continue
		}
		s.schedStats.Entries.Add(1)
		res, _ := f.Response().(fsm.BatchResult)
		for j := 0; j < sizes[i]; j++ {
			if j < len(res) {
				out = append(out, res[j])
			} else {
				out = append(out, nil)
			}
		}
	}
	return out
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}
