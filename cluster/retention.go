package cluster

import (
	"context"
	"time"

	"herd/fsm"
)

// retentionLoop (leader-only) forgets finished tasks older than the
// retention, in batches, so finished work does not accumulate forever;
// then the finished jobs older than it whose tasks are all forgotten (a
// schedule starts a run at every slot). Jobs are forgotten only while
// every server reads the command that does it (see fsm.CommandForms).
func (s *Server) retentionLoop(ctx context.Context) {
	keep := s.cfg.Scheduler.TaskRetention
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
		for ctx.Err() == nil {
			ids, err := s.fsm.State().FinishedTasks(s.now().Add(-keep), 1000)
			if err != nil || len(ids) == 0 {
				break
			}
			resp, _, err := s.apply(ctx, fsm.MsgForgetTasks, fsm.ForgetTasksRequest{TaskIDs: ids})
			if err != nil {
				s.logger.Warn("could not forget finished tasks", "error", err)
				break
			}
			s.logger.Debug("forgot finished tasks", "count", resp, "retention", keep)
			if n, _ := resp.(int); n < len(ids) {
				break
			}
		}
		for ctx.Err() == nil && s.binaryForms.Load() {
			ids := s.fsm.State().FinishedJobs(s.now().Add(-keep), 1000)
			if len(ids) == 0 {
				break
			}
			resp, _, err := s.apply(ctx, fsm.MsgForgetJobs, fsm.ForgetJobsRequest{JobIDs: ids})
			if err != nil {
				s.logger.Warn("could not forget finished jobs", "error", err)
				break
			}
			s.logger.Debug("forgot finished jobs", "count", resp, "retention", keep)
			if n, _ := resp.(int); n < len(ids) {
				break
			}
		}
	}
}
