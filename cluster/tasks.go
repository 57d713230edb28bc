package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"herd/api"
	"herd/fsm"
)

// SubmitTask validates a spec, applies defaults and commits it (leader-only).
func (e *taskEndpoints) SubmitTask(ctx context.Context, in api.TaskSpec) (api.Task, bool, uint64, error) {
	if !e.r.IsLeader() {
		return api.Task{}, false, 0, fmt.Errorf("%s: %w", e.r.ID(), api.ErrNotLeader)
	}
	task := withSizeTiers(in.Normalize(), e.sched)
	if err := task.Validate(); err != nil {
		return api.Task{}, false, 0, fmt.Errorf("invalid task spec: %v: %w", err, api.ErrBadRequest)
	}
	spec := fsm.FromSpec(task)
	now := e.r.Now().UTC()
	id := newID(now)
	if spec.Name == "" {
		spec.Name = id
	}
	resp, index, err := e.r.apply(ctx, fsm.MsgSubmitTask, fsm.SubmitTaskRequest{ID: id, SubmittedAt: now, Spec: spec})
	if err != nil {
		return api.Task{}, false, 0, err
	}
	res, ok := resp.(*fsm.SubmitResult)
	if !ok {
		return api.Task{}, false, 0, fmt.Errorf("unexpected submit response %T", resp)
	}
	return toAPITask(res.Task, nil), res.Created, index, nil
}

// SubmitTasks validates every spec, then commits them all in one entry
// (leader-only): one submit-many command once every server reads it,
// a submit-task per task before. One invalid spec refuses the whole batch.
func (e *taskEndpoints) SubmitTasks(ctx context.Context, in []api.TaskSpec) (api.BatchSubmitResponse, error) {
	if !e.r.IsLeader() {
		return api.BatchSubmitResponse{}, fmt.Errorf("%s: %w", e.r.ID(), api.ErrNotLeader)
	}
	now := e.r.Now().UTC()
	many := fsm.SubmitManyRequest{SubmittedAt: now, Tasks: make([]fsm.SubmitTaskRequest, 0, len(in))}
	for i, one := range in {
		task := withSizeTiers(one.Normalize(), e.sched)
		if err := task.Validate(); err != nil {
			return api.BatchSubmitResponse{}, fmt.Errorf("invalid task spec tasks[%d]: %v: %w", i, err, api.ErrBadRequest)
		}
		spec := fsm.FromSpec(task)
		id := newID(now)
		if spec.Name == "" {
			spec.Name = id
		}
		many.Tasks = append(many.Tasks, fsm.SubmitTaskRequest{ID: id, SubmittedAt: now, Spec: spec})
	}
	var entry []byte
	if e.r.State().EveryServerReads(fsm.FormsSubmitMany) {
		entry = fsm.EncodeSubmitMany(many)
	} else {
		cmds := make([][]byte, len(many.Tasks))
		for i, r := range many.Tasks {
			cmds[i] = fsm.EncodeSubmitTask(r)
		}
		entry = fsm.EncodeBatch(cmds)
	}
	resp, index, err := e.r.applyRaw(ctx, entry)
	if err != nil {
		return api.BatchSubmitResponse{}, err
	}
	results, ok := resp.(fsm.BatchResult)
	if !ok || len(results) != len(many.Tasks) {
		return api.BatchSubmitResponse{}, fmt.Errorf("unexpected batch submit response %T", resp)
	}
	out := api.BatchSubmitResponse{Tasks: make([]api.BatchSubmitResult, len(results)), Index: index}
	for i, r := range results {
		res, ok := r.(*fsm.SubmitResult)
		if !ok {
			// Validated above, so only a state conflict gets here.
			if err, isErr := r.(error); isErr {
				return api.BatchSubmitResponse{}, fmt.Errorf("tasks[%d]: %w", i, fsmErr(err))
			}
			return api.BatchSubmitResponse{}, fmt.Errorf("tasks[%d]: unexpected submit response %T", i, r)
		}
		out.Tasks[i] = api.BatchSubmitResult{ID: res.Task.ID, State: res.Task.State.String(), Created: res.Created}
	}
	return out, nil
}

// GetTask reads one task from the local state.
func (e *taskEndpoints) GetTask(id string) (api.Task, error) {
	st := e.r.State()
	t, err := st.Task(id)
	if errors.Is(err, fsm.ErrNotFound) {
		return api.Task{}, fmt.Errorf("task %q not found: %w", id, api.ErrNotFound)
	}
	if err != nil {
		return api.Task{}, err
	}
	attempts, err := st.AttemptsOfTask(id)
	if err != nil {
		return api.Task{}, err
	}
	return toAPITask(t, attempts), nil
}

// ListTasks lists tasks from the local state.
func (e *taskEndpoints) ListTasks(q api.TaskQuery) (api.TaskList, error) {
	state, ok := fsm.ParseTaskState(strings.ToUpper(q.State))
	if !ok {
		return api.TaskList{}, fmt.Errorf("unknown task state %q: %w", q.State, api.ErrBadRequest)
	}
	tasks, err := e.r.State().Tasks(fsm.TaskFilter{State: state, After: q.After, Limit: q.Limit + 1})
	if err != nil {
		return api.TaskList{}, err
	}
	out := api.TaskList{Tasks: make([]api.Task, 0, len(tasks))}
	if q.Limit > 0 && len(tasks) > q.Limit {
		tasks = tasks[:q.Limit]
		out.Next = tasks[len(tasks)-1].ID
	}
	for _, t := range tasks {
		out.Tasks = append(out.Tasks, toAPITask(t, nil))
	}
	return out, nil
}

// CancelTask cancels a task (leader-only); its agent sees the attempt leave
// its assignments and kills the process.
func (e *taskEndpoints) CancelTask(ctx context.Context, id, reason string) (api.Task, error) {
	if !e.r.IsLeader() {
		return api.Task{}, fmt.Errorf("%s: %w", e.r.ID(), api.ErrNotLeader)
	}
	resp, _, err := e.r.apply(ctx, fsm.MsgCancelTask, fsm.CancelTaskRequest{TaskID: id, Reason: reason, Now: e.r.Now().UTC()})
	if err != nil {
		return api.Task{}, err
	}
	return e.GetTask(resp.(*fsm.CancelResult).Task.ID)
}
