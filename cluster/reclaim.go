package cluster

import (
	"context"
	"fmt"
	"time"

	"herd/fsm"
)

// reclaimLoop (leader-only) reclaims attempts that were reserved but not
// started within the schedule-to-start timeout: their agent never saw
// them or died before starting. The attempt becomes LOST and the task is
// requeued. The reclaim applies only to an attempt still RESERVED when it
// commits, so an attempt whose start commits after the leader listed it
// keeps running; while some server reads only older command forms the
// leader writes JSON, which carries no condition, and such a start loses
// its attempt as it did before (the agent's start is refused, and it
// stops the process or never runs it).
func (s *Server) reclaimLoop(ctx context.Context) {
	timeout := s.cfg.Scheduler.ScheduleToStartTimeout
	tick := time.NewTicker(min(timeout/4, time.Second))
	defer tick.Stop()
	// A new leader does not judge attempts reserved under its predecessor
	// before a full timeout has passed under its own watch.
	since := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if time.Since(since) < timeout {
			continue
		}
		now := s.now().UTC()
		reserved, err := s.fsm.State().AttemptsInState(fsm.AttemptReserved)
		if err != nil {
			s.logger.Error("list reserved attempts", "error", err)
			continue
		}
		var cmds [][]byte
		for _, r := range reclaimsDue(reserved, now, timeout) {
			if b, err := s.encode(fsm.MsgAttemptEnd, r); err == nil {
				cmds = append(cmds, b)
			}
		}
		if len(cmds) > 0 {
			s.logger.Warn("reclaiming attempts never started", "count", len(cmds), "timeout", timeout)
			s.commitBatches(ctx, cmds, s.cfg.Scheduler.BatchSize)
		}
	}
}

// reclaimsDue is the reclaim of each reserved attempt not started within
// timeout of its reservation: LOST, retried at once, and only while it is
// still RESERVED when it applies.
func reclaimsDue(reserved []*fsm.Attempt, now time.Time, timeout time.Duration) []fsm.AttemptEndRequest {
	var out []fsm.AttemptEndRequest
	for _, a := range reserved {
		if now.Sub(a.ReservedAt.Time()) < timeout {
			continue
		}
		out = append(out, fsm.AttemptEndRequest{
			AttemptID: a.ID, LeaseVersion: a.LeaseVersion, State: fsm.AttemptLost, ExitCode: -1,
			Error: fmt.Sprintf("reclaimed: not started within %s", timeout), Now: now, RetryAt: now,
			OnlyReserved: true,
		})
	}
	return out
}
