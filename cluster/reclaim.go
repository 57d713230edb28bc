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
// requeued.
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
		for _, a := range reserved {
			if now.Sub(a.ReservedAt.Time()) < timeout {
				continue
			}
			b, err := s.encode(fsm.MsgAttemptEnd, fsm.AttemptEndRequest{
				AttemptID: a.ID, LeaseVersion: a.LeaseVersion, State: fsm.AttemptLost, ExitCode: -1,
				Error: fmt.Sprintf("reclaimed: not started within %s", timeout), Now: now, RetryAt: now,
			})
			if err == nil {
				cmds = append(cmds, b)
			}
		}
		if len(cmds) > 0 {
			s.logger.Warn("reclaiming attempts never started", "count", len(cmds), "timeout", timeout)
			s.commitBatches(ctx, cmds, s.cfg.Scheduler.BatchSize)
		}
	}
}
