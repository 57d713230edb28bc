package cluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/go-hclog"

	"herd/api"
	"herd/config"
	"herd/fsm"
	"herd/scheduler"
)

// profileSettings turns the configured profile rules into the replicated
// form (durations in milliseconds, factors in percent).
func profileSettings(p config.Profiles) fsm.ProfileSettings {
	pct := func(f float64) int { return int(math.Round(f * 100)) }
	return fsm.ProfileSettings{
		L1MinCores: p.L1MinCores, L1MinMemoryMB: p.L1MinMemoryMB, L2MinCores: p.L2MinCores, L2MinMemoryMB: p.L2MinMemoryMB,
		SlowFactorPercent: pct(p.SlowFactor), SlowRuns: p.SlowRuns, SlowWindow: p.SlowWindow,
		PromoteFactorPercent: pct(p.PromoteFactor), DwellMs: p.Dwell.Milliseconds(),
		FailureWindowMs: p.FailureWindow.Milliseconds(), FailureMinAttempts: p.FailureMinAttempts, FailureRatePercent: pct(p.FailureRate),
		BlackHoleFailures: p.BlackHoleFailures, FastFailureMs: p.FastFailure.Milliseconds(),
		QuarantineSuspectMs: p.QuarantineSuspect.Milliseconds(), QuarantineConfirmedMs: p.QuarantineConfirmed.Milliseconds(),
		SlowAttemptPercent: pct(p.SlowAttemptFactor), SlowAttemptFloorMs: p.SlowAttemptFloor.Milliseconds(),
	}
}

// profileTick is how often the leader looks for promotions due and
// quarantines whose health check is due.
const profileTick = 250 * time.Millisecond

// profileLoop, made when leadership starts, is the leader's part in
// profiles: it commits its profile settings when they differ from the
// replicated ones, then proposes what time alone makes due: a promotion
// once a demoted node's dwell has passed (Apply checks it held healthy),
// health checks of quarantined nodes whose quarantine has run out or
// whose failed check is due again, slow marks of attempts past their
// class's threshold and backups of slow speculative tasks. Everything
// else (demotions, quarantines, releases) is derived at apply time from
// the facts that cause it.
type profileLoop struct {
	r        proposer
	profiles config.Profiles
	sched    config.Scheduler
	logger   hclog.Logger
}

func (l *profileLoop) run(ctx context.Context) {
	want := profileSettings(l.profiles)
	for ctx.Err() == nil {
		if l.r.State().ProfileSettings() == want {
			break
		}
		if _, _, err := l.r.apply(ctx, fsm.MsgProfileSettings, fsm.ProfileSettingsRequest{Settings: want, Now: l.r.Now().UTC()}); err != nil {
			l.logger.Warn("could not commit the profile settings", "error", err)
			sleepCtx(ctx, time.Second)
			continue
		}
		l.logger.Info("profile settings committed", "settings", fmt.Sprintf("%+v", want))
	}
	tried := map[string]time.Time{} // node → when a proposal was last made for it
	marked := map[string]bool{}     // attempts proposed slow
	var lastSlowScan time.Time
	for ctx.Err() == nil {
		now := l.r.Now().UTC()
		nodes, err := l.r.State().Nodes()
		if err != nil {
			l.logger.Error("profile loop: read nodes", "error", err)
		}
		for _, n := range nodes {
			if t, ok := tried[n.ID]; ok && now.Sub(t) < l.profiles.HealthRecheck {
				continue // a proposal refused (not healthy yet) waits a recheck
			}
			if op, why := fsm.ProfileDue(n, l.profiles.Dwell, l.profiles.HealthRecheck, now); op != "" {
				tried[n.ID] = now
				var err error
				if op == fsm.TierOpPromote {
					_, _, err = l.r.apply(ctx, fsm.MsgNodeTier, fsm.NodeTierRequest{NodeID: n.ID, Op: fsm.TierOpPromote, Now: now})
				} else {
					_, _, err = l.r.apply(ctx, fsm.MsgNodeHealthCheck, fsm.NodeHealthCheckRequest{NodeID: n.ID, Op: fsm.HealthCheckRequest, Why: why, Now: now})
				}
				switch {
				case err == nil || ctx.Err() != nil:
				case errors.Is(err, api.ErrConflict):
					// Apply found it not due after all (a slow run since).
					l.logger.Debug("profile loop: refused", "node", n.ID, "op", op, "why", err)
				default:
					l.logger.Warn("profile loop", "node", n.ID, "op", op, "error", err)
				}
			}
		}
		if now.Sub(lastSlowScan) >= slowScanEvery {
			lastSlowScan = now
			l.markSlowAttempts(ctx, now, marked)
		}
		sleepCtx(ctx, profileTick)
	}
}

// slowScanEvery is how often the leader compares running attempts with
// their class's slow threshold.
const slowScanEvery = time.Second

// markSlowAttempts proposes marking slow every running attempt past its
// class's slow threshold (Apply checks it again). marked remembers the
// attempts proposed, so each is proposed once; it forgets those no longer
// running.
func (l *profileLoop) markSlowAttempts(ctx context.Context, now time.Time, marked map[string]bool) {
	st := l.r.State()
	running, err := st.AttemptsInState(fsm.AttemptRunning)
	if err != nil {
		return
	}
	live := make(map[string]bool, len(running))
	for _, a := range running {
		live[a.ID] = true
		if a.StartedAt.IsZero() {
			continue
		}
		task, err := st.Task(a.TaskID)
		if err != nil || task.CurrentAttempt() != a.ID {
			continue
		}
		if task.CurrentSlow() {
			if task.Spec.TaskShape != nil && task.Spec.Speculative && st.BackupAttempt(task) == "" {
				l.placeBackup(ctx, st, task, a, now)
			}
			continue
		}
		if marked[a.ID] {
			continue
		}
		limit, ok := st.SlowThreshold(task.Spec.ClassOf(), a.NodeID)
		if !ok || now.Sub(a.StartedAt.Time()) < limit {
			continue
		}
		marked[a.ID] = true
		if _, _, err := l.r.apply(ctx, fsm.MsgAttemptSlow, fsm.AttemptSlowRequest{AttemptID: a.ID, Now: now}); err != nil && ctx.Err() == nil && !errors.Is(err, api.ErrConflict) {
			l.logger.Warn("mark a slow attempt", "attempt", a.ID, "error", err)
		}
	}
	for id := range marked {
		if !live[id] {
			delete(marked, id)
		}
	}
}

// placeBackup reserves a backup attempt for a speculative task whose
// attempt is slow, on the best other node that fits (never the slow
// attempt's); the backup races the slow attempt, and the first success
// wins (see fsm/speculative.go). With no node fitting it tries again on
// the next look.
func (l *profileLoop) placeBackup(ctx context.Context, st *fsm.State, task *fsm.Task, slow *fsm.Attempt, now time.Time) {
	nodes, nodeByID, fleet, err := nodeViews(st, now, l.profiles)
	if err != nil {
		return
	}
	req := task.Request(now, l.sched.HeartbeatTTL)
	fleet.fill(&req)
	req.Blacklist = task.Blacklist(nodeByID)
	if req.Blacklist == nil {
		req.Blacklist = map[string]bool{}
	}
	req.Blacklist[slow.NodeID] = true
	scoring := scoringConfig(l.sched)
	cand, err := scheduler.Select(nodes, &req, &scoring)
	if err != nil {
		return
	}
	rec := nodeByID(cand.Node.ID)
	if rec == nil {
		return
	}
	_, _, err = l.r.apply(ctx, fsm.MsgReserve, fsm.ReserveRequest{
		TaskID: task.ID, AttemptID: newID(now), Number: int(task.Attempts) + 1, NodeID: cand.Node.ID,
		SessionGeneration: rec.SessionGeneration, Score: cand.Score, Now: now, HeartbeatTTL: l.sched.HeartbeatTTL, Backup: true,
	})
	switch {
	case err == nil:
		l.logger.Info("backup attempt reserved for a slow speculative task", "task", task.ID, "slow_attempt", slow.ID, "node", cand.Node.ID)
	case ctx.Err() != nil:
	default:
		l.logger.Debug("backup attempt refused", "task", task.ID, "error", err)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (e *nodeEndpoints) nodeCommand(ctx context.Context, t fsm.MessageType, payload any) (api.Node, error) {
	if !e.r.IsLeader() {
		return api.Node{}, fmt.Errorf("%s: %w", e.r.ID(), api.ErrNotLeader)
	}
	resp, _, err := e.r.apply(ctx, t, payload)
	if err != nil {
		return api.Node{}, err
	}
	n, ok := resp.(*fsm.Node)
	if !ok {
		return api.Node{}, fmt.Errorf("unexpected response %T", resp)
	}
	return e.apiNode(e.r.State(), n), nil
}

// ReportProfile commits a node's new measurement (leader-only).
func (e *nodeEndpoints) ReportProfile(ctx context.Context, nodeID string, r api.NodeProfileReport) (api.Node, error) {
	return e.nodeCommand(ctx, fsm.MsgNodeProfile, fsm.NodeProfileRequest{NodeID: nodeID, SessionGeneration: r.SessionGeneration, Profile: toFSMProfile(r.Profile), Now: e.r.Now().UTC()})
}

// ReportDatasets replaces the datasets a node holds (leader-only).
func (e *nodeEndpoints) ReportDatasets(ctx context.Context, nodeID string, r api.NodeDatasetsReport) (api.Node, error) {
	return e.nodeCommand(ctx, fsm.MsgNodeDatasets, fsm.NodeDatasetsRequest{NodeID: nodeID, SessionGeneration: r.SessionGeneration, Datasets: toSchedulerDatasets(r.Datasets), Now: e.r.Now().UTC()})
}

// ReportHealthCheck records a node's health check answer (leader-only).
func (e *nodeEndpoints) ReportHealthCheck(ctx context.Context, nodeID string, r api.HealthCheckReport) (api.Node, error) {
	return e.nodeCommand(ctx, fsm.MsgNodeHealthCheck, fsm.NodeHealthCheckRequest{NodeID: nodeID, Op: fsm.HealthCheckResult, Seq: r.Seq, Passed: r.Passed, Output: r.Output, Now: e.r.Now().UTC()})
}

// RequestHealthCheck asks a node's agent for a health check (leader-only).
func (e *nodeEndpoints) RequestHealthCheck(ctx context.Context, nodeID string) (api.Node, error) {
	return e.nodeCommand(ctx, fsm.MsgNodeHealthCheck, fsm.NodeHealthCheckRequest{NodeID: nodeID, Op: fsm.HealthCheckRequest, Why: "asked by an operator", Now: e.r.Now().UTC()})
}

// SetNodeTier pins or unpins a node's tier (leader-only).
func (e *nodeEndpoints) SetNodeTier(ctx context.Context, nodeID string, r api.NodeTierRequest) (api.Node, error) {
	req := fsm.NodeTierRequest{NodeID: nodeID, Op: fsm.TierOpAuto, Now: e.r.Now().UTC()}
	if r.Tier != "auto" {
		t, ok := scheduler.ParseTier(r.Tier)
		if !ok {
			return api.Node{}, fmt.Errorf("tier %q must be L1, L2, L3 or auto: %w", r.Tier, api.ErrBadRequest)
		}
		req.Op, req.Tier = fsm.TierOpPin, t
	}
	return e.nodeCommand(ctx, fsm.MsgNodeTier, req)
}

// RequestRebench asks a node's agent to measure its node again
// (leader-only).
func (e *nodeEndpoints) RequestRebench(ctx context.Context, nodeID string) (api.Node, error) {
	return e.nodeCommand(ctx, fsm.MsgNodeTier, fsm.NodeTierRequest{NodeID: nodeID, Op: fsm.TierOpRebench, Now: e.r.Now().UTC()})
}

func toFSMProfile(p api.NodeProfile) fsm.NodeProfile {
	return fsm.NodeProfile{
		CPUScore: p.CPUScore, MemoryMBps: p.MemoryMBps, FsyncMicros: p.FsyncMicros, Cores: p.Cores,
		MemoryMB: p.MemoryMB, DiskFreeMB: p.DiskFreeMB, Benchmarked: p.Benchmarked, BenchMillis: p.BenchMillis,
		Rounds: p.Rounds, CPUSpreadPct: p.CPUSpreadPct, MemorySpreadPct: p.MemorySpreadPct, RTTMicros: p.RTTMicros, NetworkMBps: p.NetworkMBps,
	}
}

func toAPIProfile(p *fsm.NodeProfile) *api.NodeProfile {
	if p == nil {
		return nil
	}
	return &api.NodeProfile{
		CPUScore: p.CPUScore, MemoryMBps: p.MemoryMBps, FsyncMicros: p.FsyncMicros, Cores: p.Cores,
		MemoryMB: p.MemoryMB, DiskFreeMB: p.DiskFreeMB, Benchmarked: p.Benchmarked, BenchMillis: p.BenchMillis,
		MeasuredAt: p.MeasuredAt.Time(), Rounds: p.Rounds, CPUSpreadPct: p.CPUSpreadPct, MemorySpreadPct: p.MemorySpreadPct,
		RTTMicros: p.RTTMicros, NetworkMBps: p.NetworkMBps,
	}
}

func toSchedulerDatasets(ds []api.Dataset) []scheduler.Dataset {
	if len(ds) == 0 {
		return nil
	}
	out := make([]scheduler.Dataset, len(ds))
	for i, d := range ds {
		out[i] = scheduler.Dataset{Name: d.Name, Bytes: d.Bytes}
	}
	return out
}

func toAPIDatasets(ds []scheduler.Dataset) []api.Dataset {
	if len(ds) == 0 {
		return nil
	}
	out := make([]api.Dataset, len(ds))
	for i, d := range ds {
		out[i] = api.Dataset{Name: d.Name, Bytes: d.Bytes}
	}
	return out
}

// apiNode is a node as the API shows it, with what the cluster derived of
// it: tier, health now, quarantine, health check and per-class history
// beside the fleet's median.
func (e *nodeEndpoints) apiNode(st *fsm.State, n *fsm.Node) api.Node {
	out := toAPINode(n)
	out.Observation = e.observe(n)
	now := e.r.Now().UTC()
	out.Profile = toAPIProfile(n.Profile)
	out.Datasets = toAPIDatasets(n.Datasets)
	out.Tier = api.NodeTier{Tier: n.Tier.Tier.String(), Base: n.Tier.Base.String(), Pinned: n.Tier.Pin != scheduler.TierUnknown, Demotions: n.Tier.Demotions, ChangedAt: n.Tier.ChangedAt.Time()}
	blamed, total := n.History.BlamedRate(now, e.profiles.FailureWindow)
	out.Health = api.NodeHealth{OnlineRatio: n.OnlineRatio(now), Failures: blamed, Results: total}
	out.Health.Score = out.Health.OnlineRatio
	if total > 0 {
		out.Health.Score *= 1 - float64(blamed)/float64(total)
	}
	if q := n.Quarantine; q != nil {
		out.Quarantine = &api.Quarantine{Level: q.Level, Class: q.Class, Reason: q.Reason, Since: q.Since.Time(), Until: q.Until.Time(), CheckFailed: q.CheckFailed, Tasks: q.Tasks, Confirmed: q.Confirmed}
	}
	if hc := n.HealthCheck; hc.Requested > 0 {
		out.HealthCheck = &api.HealthCheck{Requested: hc.Requested, Answered: hc.Answered, Passed: hc.Passed, Output: hc.Output, At: hc.At.Time(), Why: hc.Why}
	}
	if n.History != nil {
		for _, c := range n.History.Classes {
			out.History = append(out.History, api.ClassHistory{
				Class: c.Class, Runs: c.Runs, Failures: c.Failures, EWMAMillis: c.EWMAMilli, FleetMedianMillis: st.Class(c.Class).Median(),
				RecentMillis: c.Recent, ConsecutiveFailures: c.ConsecutiveFailures, FastStreak: c.FastStreak,
			})
		}
	}
	return out
}
