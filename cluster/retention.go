package cluster

import (
	"context"
	"github.com/hashicorp/go-hclog"
	"time"

	"herd/fsm"
)

// retentionLoop, made when leadership starts, forgets finished tasks
// older than the retention (keep), in batches, so finished work does not
// accumulate forever; then the finished jobs older than it whose tasks
// are all forgotten (a schedule starts a run at every slot).
type retentionLoop struct {
	r      proposer
	keep   time.Duration
	logger hclog.Logger
}

func (l *retentionLoop) run(ctx context.Context) {
	keep := l.keep
	if keep <= 0 {
		return
	}
	tick := time.NewTicker(min(keep/4, time.Minute))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		l.forgetFinished(ctx, "tasks", keep, func(cutoff time.Time) []string {
			ids, _ := l.r.State().FinishedTasks(cutoff, forgetBatch)
			return ids
		}, func(ids []string) (fsm.MessageType, any) {
			return fsm.MsgForgetTasks, fsm.ForgetTasksRequest{TaskIDs: ids}
		})
		l.forgetFinished(ctx, "jobs", keep, func(cutoff time.Time) []string {
			return l.r.State().FinishedJobs(cutoff, forgetBatch)
		}, func(ids []string) (fsm.MessageType, any) {
			return fsm.MsgForgetJobs, fsm.ForgetJobsRequest{JobIDs: ids}
		})
	}
}

// forgetBatch bounds the records one forget command names.
const forgetBatch = 1000

// forgetFinished commits, batch after batch, the forgetting of what list
// names as finished before the retention, until a batch comes back empty
// or not wholly forgotten (the rest changed meanwhile) or a command fails.
func (l *retentionLoop) forgetFinished(ctx context.Context, what string, keep time.Duration, list func(cutoff time.Time) []string, command func(ids []string) (fsm.MessageType, any)) {
	for ctx.Err() == nil {
		ids := list(l.r.Now().Add(-keep))
		if len(ids) == 0 {
			return
		}
		t, req := command(ids)
		resp, _, err := l.r.apply(ctx, t, req)
		if err != nil {
			l.logger.Warn("could not forget finished "+what, "error", err)
			return
		}
		l.logger.Debug("forgot finished "+what, "count", resp, "retention", keep)
		if n, _ := resp.(int); n < len(ids) {
			return
		}
	}
}
