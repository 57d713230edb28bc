package httpapi

import (
	"context"
	"herd/api"
	"herd/spec"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// TaskBackend submits, reads, explains and cancels tasks.
type TaskBackend interface {
	// SubmitTask (leader-only) answers the task, whether this call created
	// it (false: its idempotency key named an existing task) and the index
	// it committed at.
	SubmitTask(ctx context.Context, spec api.TaskSpec) (api.Task, bool, uint64, error)
	// SubmitTasks (leader-only) submits a batch in one entry.
	SubmitTasks(ctx context.Context, specs []api.TaskSpec) (api.BatchSubmitResponse, error)
	GetTask(id string) (api.Task, error)
	ListTasks(q api.TaskQuery) (api.TaskList, error)
	ExplainTask(id string) (api.Explanation, error)
	ExplainSpec(req api.ExplainRequest) (api.Explanation, error)
	// CancelTask is leader-only.
	CancelTask(ctx context.Context, id string, reason string) (api.Task, error)
	// TaskLog writes an attempt's log (number 0: the latest) to w as the
	// node that ran it keeps it, or fails before writing anything.
	TaskLog(ctx context.Context, w http.ResponseWriter, id string, number int, tail int64, follow bool) error
}

func (h *Handler) taskRoutes() []route {
	return []route{
		{http.MethodGet, "/v1/tasks", readable, capRead, h.listTasks},
		{http.MethodPost, "/v1/tasks", leaderOnly, capSubmit, h.postTask},
		{http.MethodPost, "/v1/tasks/batch", leaderOnly, capSubmit, h.postTaskBatch},
		{http.MethodGet, "/v1/tasks/{id}", readable, capAgentOrRead, h.getTask},
		{http.MethodGet, "/v1/tasks/{id}/explain", readable, capRead, h.getTaskExplain},
		{http.MethodPost, "/v1/tasks/{id}/cancel", leaderOnly, capSubmit, h.postCancel},
		{http.MethodPost, "/v1/explain", readable, capRead, h.postExplain},
		{http.MethodGet, "/v1/tasks/{id}/logs", local, capRead, h.getTaskLog},
	}
}

// getTaskLog streams an attempt's log from the node that keeps it:
// ?attempt=N (default the latest), tail=BYTES, follow=true.
func (h *Handler) getTaskLog(w http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "task")
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	number := 0
	if v := q.Get("attempt"); v != "" {
		if number, err = strconv.Atoi(v); err != nil || number < 1 {
			return nil, badRequest("attempt %q must be a number from 1", v)
		}
	}
	var tail int64
	if v := q.Get("tail"); v != "" {
		if tail, err = strconv.ParseInt(v, 10, 64); err != nil || tail < 0 {
			return nil, badRequest("tail %q must be a number of bytes", v)
		}
	}
	follow := false
	if v := q.Get("follow"); v != "" {
		if follow, err = strconv.ParseBool(v); err != nil {
			return nil, badRequest("follow %q must be true or false", v)
		}
	}
	if err := h.checkReadTask(r, id); err != nil {
		return nil, err
	}
	if err := h.backend.TaskLog(r.Context(), w, id, number, tail, follow); err != nil {
		return nil, err
	}
	return written, nil
}

func (h *Handler) postTask(w http.ResponseWriter, r *http.Request) (any, error) {
	var spec api.TaskSpec
	if err := decodeBody(w, r, &spec); err != nil {
		return nil, err
	}
	if err := checkSubmitter(r, spec.Submitter); err != nil {
		return nil, err
	}
	task, created, index, err := h.backend.SubmitTask(r.Context(), spec)
	if err != nil {
		return nil, err
	}
	return submitted(w, "/v1/tasks/"+task.ID, created, api.SubmitResponse{ID: task.ID, State: task.State, Index: index}), nil
}

func (h *Handler) postTaskBatch(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.BatchSubmitRequest
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	switch n := len(req.Tasks); {
	case n == 0:
		return nil, badRequest("a batch needs at least one task")
	case n > api.MaxBatchTasks:
		return nil, badRequest("a batch holds at most %d tasks, got %d: send several", api.MaxBatchTasks, n)
	}
	for _, spec := range req.Tasks {
		if err := checkSubmitter(r, spec.Submitter); err != nil {
			return nil, err
		}
	}
	return h.backend.SubmitTasks(r.Context(), req.Tasks)
}

func (h *Handler) getTask(w http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "task")
	if err != nil {
		return nil, err
	}
	task, err := h.backend.GetTask(id)
	if err != nil {
		return nil, err
	}
	// A node reads the tasks it runs (an attempt's lease check), no other.
	if p := PrincipalOf(r.Context()); p.Node != "" && !slices.ContainsFunc(task.Attempts, func(a api.Attempt) bool { return a.NodeID == p.Node }) {
		if h.mayForward(r) {
			// The leader answers, and records the refusal.
			h.forward(w, r)
			return written, nil
		}
		return nil, h.refuse(r, "read task", id, forbidden("%s acts for node %s only: task %s has no attempt there", p.Actor, p.Node, id))
	}
	if p := PrincipalOf(r.Context()); !p.mayReadTask(task) {
		return nil, forbidden("%s reads the work of %v only; task %s is %s's", p.Actor, p.Submitters, id, submitterOf(task))
	}
	return task, nil
}

func (h *Handler) getTaskExplain(_ http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "task")
	if err != nil {
		return nil, err
	}
	if err := h.checkReadTask(r, id); err != nil {
		return nil, err
	}
	return h.backend.ExplainTask(id)
}

func (h *Handler) postExplain(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.ExplainRequest
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	return h.backend.ExplainSpec(req)
}

// cancelBody reads a cancel's optional body, its reason bounded.
func cancelBody(w http.ResponseWriter, r *http.Request) (api.CancelRequest, error) {
	var req api.CancelRequest
	if r.ContentLength != 0 {
		if err := decodeBody(w, r, &req); err != nil {
			return req, err
		}
	}
	if len(req.Reason) > api.MaxErrorText {
		return req, badRequest("reason is longer than %d bytes", api.MaxErrorText)
	}
	return req, nil
}

func (h *Handler) postCancel(w http.ResponseWriter, r *http.Request) (any, error) {
	return h.cancelOwned(w, r, "task", func(id string) ([]string, error) {
		task, err := h.backend.GetTask(id)
		if err != nil {
			return nil, err
		}
		return []string{task.Spec.Submitter}, nil
	}, func(ctx context.Context, id, reason string) (any, error) {
		return h.backend.CancelTask(ctx, id, reason)
	})
}

// cancelOwned cancels the task or job (kind) the path names, for the
// reason the body gives. A token limited to named submitters cancels only
// what every one of its submitters (owners) is among them.
func (h *Handler) cancelOwned(w http.ResponseWriter, r *http.Request, kind string, owners func(id string) ([]string, error),
	cancel func(ctx context.Context, id, reason string) (any, error)) (any, error) {
	id, err := pathID(r, kind)
	if err != nil {
		return nil, err
	}
	req, err := cancelBody(w, r)
	if err != nil {
		return nil, err
	}
	if p := PrincipalOf(r.Context()); len(p.Submitters) > 0 {
		submitters, err := owners(id)
		if err != nil {
			return nil, err
		}
		for _, s := range submitters {
			if err := checkSubmitter(r, s); err != nil {
				return nil, err
			}
		}
	}
	return cancel(r.Context(), id, req.Reason)
}

// checkSubmitter refuses a token limited to named submitters acting for
// another.
func checkSubmitter(r *http.Request, submitter string) error {
	if submitter == "" {
		submitter = spec.DefaultSubmitter
	}
	if p := PrincipalOf(r.Context()); !p.MaySubmitAs(submitter) {
		return forbidden("%s may submit only for %v, not for submitter %q", p.Actor, p.Submitters, submitter)
	}
	return nil
}

func (h *Handler) listTasks(_ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	limit, err := listLimit(q.Get("limit"))
	if err != nil {
		return nil, err
	}
	query := api.TaskQuery{State: strings.ToUpper(q.Get("state")), After: q.Get("after"), Limit: limit}
	if query.After != "" && !api.ValidRef(query.After) {
		return nil, badRequest("after %q is not a valid task id", query.After)
	}
	list, err := h.backend.ListTasks(query)
	if p := PrincipalOf(r.Context()); err == nil && p.scoped() {
		list.Tasks = slices.DeleteFunc(list.Tasks, func(t api.Task) bool { return !p.mayReadTask(t) })
	}
	return list, err
}
