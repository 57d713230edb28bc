package cluster

import (
	"context"
	"fmt"
	"github.com/hashicorp/go-hclog"
	"time"

	"herd/fsm"
)

// reclaimLoop, made when leadership starts, reclaims attempts that were
// reserved but not started within the schedule-to-start timeout: their
// agent never saw them or died before starting. The attempt becomes
// LOST and the task is requeued. The reclaim applies only to an attempt
// still RESERVED when it commits, so an attempt whose start commits after
// the leader listed it keeps running.
type reclaimLoop struct {
	r         proposer
	timeout   time.Duration
	batchSize int
	logger    hclog.Logger
}

func (l *reclaimLoop) run(ctx context.Context) {
	timeout := l.timeout
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
		now := l.r.Now().UTC()
		reserved, err := l.r.State().AttemptsInState(fsm.AttemptReserved)
		if err != nil {
			l.logger.Error("list reserved attempts", "error", err)
			continue
		}
		var cmds [][]byte
		for _, r := range reclaimsDue(reserved, now, timeout) {
			if b, err := fsm.Encode(fsm.MsgAttemptEnd, r); err == nil {
				cmds = append(cmds, b)
			}
		}
		if len(cmds) > 0 {
			l.logger.Warn("reclaiming attempts never started", "count", len(cmds), "timeout", timeout)
			l.r.commitBatches(ctx, cmds, l.batchSize)
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
