package cluster

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"herd/config"
	"herd/fsm"
)

// SchedulerStats are the scheduling loop's counters, served by
// GET /v1/operator/scheduler. Counters only grow; gauges reflect the
// latest pass.
type SchedulerStats struct {
	Passes       atomic.Uint64
	Scanned      atomic.Uint64 // waiting tasks the passes looked at
	Placements   atomic.Uint64
	Entries      atomic.Uint64 // Raft entries carrying placements
	Explains     atomic.Uint64 // waiting tasks explained
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

// scheduleLoop, made when leadership starts, is the leader's placement
// loop: it looks at the committed state, decides placements in queue
// order against a working copy of the nodes (so one pass never overbooks
// a node itself), commits them in batches, and waits for the state to
// change. The FSM re-checks every placement, so a decision from a view
// that went stale is rejected, never applied twice. It reads the replica
// through view and commits through out, as each pass does; kick wakes it
// when a hibernating node wakes up.
type scheduleLoop struct {
	cfg         config.Scheduler
	profiles    config.Profiles
	wakeTimeout time.Duration
	view        passView
	out         passCommitter
	kick        <-chan struct{}
	stats       *SchedulerStats
	logger      hclog.Logger
}

func (l *scheduleLoop) run(ctx context.Context) {
	ps := newPassState(l.cfg)
	fl := ps.fl
	defer ps.commits.Wait()
	for ctx.Err() == nil {
		ws := fsm.NewWatchSet()
		passStart := time.Now()
		decided, wake := l.newPass(ps).run(ctx, ws)
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
			wait = min(wait, max(wake.Sub(l.view.Now()), time.Millisecond))
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		go func() {
			select {
			case <-l.kick: // a hibernating node woke up
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

// newPass is a pass of this loop.
func (l *scheduleLoop) newPass(ps *passState) *pass {
	return &pass{
		cfg: l.cfg, profiles: l.profiles, wakeTimeout: l.wakeTimeout,
		view: l.view, out: l.out, stats: l.stats, logger: l.logger, ps: ps,
	}
}

// serverPassView is the Server as a pass reads it.
type serverPassView struct{ s *Server }

func (v serverPassView) State() *fsm.State { return v.s.fsm.State() }
func (v serverPassView) Now() time.Time    { return v.s.now() }
func (v serverPassView) Hibernating(id string, lastHeartbeat, sessionStart, now time.Time) bool {
	_, _, sleeping := v.s.monitor.view(id, lastHeartbeat, sessionStart, now)
	return sleeping
}

// serverCommitter commits a pass's decisions through Raft, in the command
// forms the cluster reads, and wakes nodes over gossip.
type serverCommitter struct{ s *Server }

func (c serverCommitter) Wake(id string) error { return c.s.wake(id) }

func (c serverCommitter) Commit(ctx context.Context, reserves []fsm.ReserveRequest, explains []fsm.ExplainRequest) int {
	s := c.s
	batch := s.cfg.Scheduler.BatchSize
	cmds := make([][]byte, 0, len(reserves))
	for _, r := range reserves {
		cmds = append(cmds, fsm.EncodeReserve(r))
	}
	accepted := s.commitPlacements(ctx, cmds, batch)
	if len(explains) > 0 {
		s.commitBatches(ctx, encodeExplains(explains, s.fsm.State().EveryServerReads(fsm.FormsExplainMany)), batch)
	}
	return accepted
}

// encodeExplains encodes a pass's explanations: with many, one command
// per reason (tasks mostly wait for a few reasons, and a command per task
// repeats the reason in the log and costs every replica a decode each),
// else one per task, the form every release reads.
func encodeExplains(explains []fsm.ExplainRequest, many bool) [][]byte {
	if !many {
		cmds := make([][]byte, 0, len(explains))
		for _, e := range explains {
			cmds = append(cmds, fsm.EncodeExplain(e))
		}
		return cmds
	}
	// In the order each reason first appears: deterministic, and the
	// first task explained is recorded first. A pass explains at one
	// time; explanations of other times would not share a command.
	type reasonAt struct {
		summary string
		at      int64
	}
	var reasons []*fsm.ExplainManyRequest
	byReason := map[reasonAt]*fsm.ExplainManyRequest{}
	for _, e := range explains {
		k := reasonAt{e.Summary, e.Now.UnixNano()}
		r := byReason[k]
		if r == nil || len(r.TaskIDs) == maxExplainManyTasks {
			r = &fsm.ExplainManyRequest{Summary: e.Summary, Now: e.Now}
			byReason[k] = r
			reasons = append(reasons, r)
		}
		r.TaskIDs = append(r.TaskIDs, e.TaskID)
	}
	cmds := make([][]byte, 0, len(reasons))
	for _, r := range reasons {
		cmds = append(cmds, fsm.EncodeExplainMany(*r))
	}
	return cmds
}

// maxExplainManyTasks bounds the tasks of one explain-many command, so
// that one command stays a small part of an entry.
const maxExplainManyTasks = 512

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

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}
