package cluster

import (
	"context"
	"errors"
	"fmt"

	"herd/api"
	"herd/fsm"
)

// SubmitJob validates a job whole, applies each stage's task defaults and
// commits it (leader-only); the stages without dependencies start at
// once.
func (e *jobEndpoints) SubmitJob(ctx context.Context, in api.JobSpec) (api.Job, bool, uint64, error) {
	if !e.r.IsLeader() {
		return api.Job{}, false, 0, fmt.Errorf("%s: %w", e.r.ID(), api.ErrNotLeader)
	}
	now := e.r.Now().UTC()
	id := newID(now)
	job := in.Normalize()
	if job.Name == "" {
		job.Name = id
	}
	for i := range job.Stages {
		job.Stages[i].Task = withSizeTiers(job.Stages[i].Task, e.sched)
	}
	if sc := job.Schedule; sc != nil {
		if _, _, err := parseSchedule(sc); err != nil {
			return api.Job{}, false, 0, fmt.Errorf("invalid job: schedule: %v: %w", err, api.ErrBadRequest)
		}
	}
	if err := job.Validate(); err != nil {
		return api.Job{}, false, 0, fmt.Errorf("invalid job: %v: %w", err, api.ErrBadRequest)
	}
	resp, index, err := e.r.apply(ctx, fsm.MsgSubmitJob, fsm.SubmitJobRequest{ID: id, SubmittedAt: now, Spec: job})
	if err != nil {
		return api.Job{}, false, 0, err
	}
	res, ok := resp.(*fsm.JobResult)
	if !ok {
		return api.Job{}, false, 0, fmt.Errorf("unexpected job response %T", resp)
	}
	return toAPIJob(e.r.State(), res.Job), res.Created, index, nil
}

// GetJob reads a job with its stages' tasks from the local state.
func (e *jobEndpoints) GetJob(id string) (api.Job, error) {
	st := e.r.State()
	j, err := st.Job(id)
	if errors.Is(err, fsm.ErrNotFound) {
		return api.Job{}, fmt.Errorf("job %q not found: %w", id, api.ErrNotFound)
	}
	if err != nil {
		return api.Job{}, err
	}
	return toAPIJob(st, j), nil
}

// ListJobs lists jobs in id (submission) order, a page at a time.
func (e *jobEndpoints) ListJobs(after string, limit int) (api.JobList, error) {
	st := e.r.State()
	jobs := st.Jobs(after, limit+1)
	out := api.JobList{Jobs: make([]api.Job, 0, min(len(jobs), limit))}
	for i, j := range jobs {
		if i == limit {
			out.Next = jobs[i-1].ID
			break
		}
		aj := toAPIJob(st, j)
		aj.Timeline = nil
		out.Jobs = append(out.Jobs, aj)
	}
	return out, nil
}

// CancelJob cancels a job and its live stages (leader-only).
func (e *jobEndpoints) CancelJob(ctx context.Context, id, reason string) (api.Job, error) {
	if !e.r.IsLeader() {
		return api.Job{}, fmt.Errorf("%s: %w", e.r.ID(), api.ErrNotLeader)
	}
	resp, _, err := e.r.apply(ctx, fsm.MsgCancelJob, fsm.CancelJobRequest{JobID: id, Reason: reason, Now: e.r.Now().UTC()})
	if err != nil {
		return api.Job{}, err
	}
	res, ok := resp.(*fsm.JobResult)
	if !ok {
		return api.Job{}, fmt.Errorf("unexpected cancel response %T", resp)
	}
	return toAPIJob(e.r.State(), res.Job), nil
}

func toAPIJob(st *fsm.State, j *fsm.Job) api.Job {
	out := api.Job{ID: j.ID, Name: j.Spec.Name, State: j.State, OnFailure: j.Spec.OnFailure, CreateIndex: j.CreateIndex, ModifyIndex: j.ModifyIndex,
		ScheduledBy: j.ScheduledBy, LastRun: j.LastRun, NextFiring: nextFiring(j)}
	if sc := j.Spec.Schedule; sc != nil {
		out.Schedule = &api.Schedule{Cron: sc.Cron, TimeZone: sc.TimeZone, CatchUp: sc.CatchUp, Overlap: sc.Overlap}
	}
	for _, f := range j.Firings {
		out.Firings = append(out.Firings, api.Firing{Slot: f.Slot.Time(), At: f.At.Time(), Run: f.Run, Outcome: f.Outcome})
	}
	if len(j.Timeline) > 0 {
		out.SubmittedAt = j.Timeline[0].Time.Time()
	}
	for i, sst := range j.Stages {
		stage := api.JobStage{Name: sst.Name, State: sst.State, DependsOn: j.Spec.Stages[i].DependsOn, TaskIDs: sst.TaskIDs}
		if stage.TaskIDs == nil {
			stage.TaskIDs = []string{}
		}
		for _, id := range sst.TaskIDs {
			t, err := st.Task(id)
			if err != nil {
				stage.Tasks = append(stage.Tasks, api.JobStageTask{ID: id, State: "FORGOTTEN"})
				continue
			}
			x := api.JobStageTask{ID: id, State: t.State.String(), Attempts: int(t.Attempts)}
			if attempts, err := st.AttemptsOfTask(id); err == nil && len(attempts) > 0 {
				last := attempts[0]
				for _, a := range attempts {
					if a.Number > last.Number {
						last = a
					}
				}
				x.NodeID = last.NodeID
			}
			stage.Tasks = append(stage.Tasks, x)
		}
		out.Stages = append(out.Stages, stage)
	}
	if len(j.Stages) == 0 {
		// A scheduled job: its stages are its runs'.
		for _, st := range j.Spec.Stages {
			out.Stages = append(out.Stages, api.JobStage{Name: st.Name, State: "-", DependsOn: st.DependsOn, TaskIDs: []string{}})
		}
	}
	for _, e := range j.Timeline {
		out.Timeline = append(out.Timeline, api.TimelineEvent{Index: e.Index, Time: e.Time.Time(), Kind: e.Kind.String(), Message: e.Message})
	}
	return out
}
