package httpapi

import (
	"context"
	"herd/api"
	"net/http"
	"slices"
)

// JobBackend submits, reads and cancels jobs. SubmitJob and CancelJob are
// leader-only.
type JobBackend interface {
	SubmitJob(ctx context.Context, spec api.JobSpec) (api.Job, bool, uint64, error)
	GetJob(id string) (api.Job, error)
	ListJobs(after string, limit int) (api.JobList, error)
	CancelJob(ctx context.Context, id, reason string) (api.Job, error)
}

func (h *Handler) jobRoutes() []route {
	return []route{
		{http.MethodPost, "/v1/jobs", leaderOnly, capSubmit, h.postJob},
		{http.MethodGet, "/v1/jobs", readable, capRead, h.listJobs},
		{http.MethodGet, "/v1/jobs/{id}", readable, capRead, h.getJob},
		{http.MethodPost, "/v1/jobs/{id}/cancel", leaderOnly, capSubmit, h.postJobCancel},
	}
}

func (h *Handler) postJob(w http.ResponseWriter, r *http.Request) (any, error) {
	var spec api.JobSpec
	if err := decodeBody(w, r, &spec); err != nil {
		return nil, err
	}
	for _, st := range spec.Stages {
		if err := checkSubmitter(r, st.Task.Submitter); err != nil {
			return nil, err
		}
	}
	job, created, index, err := h.backend.SubmitJob(r.Context(), spec)
	if err != nil {
		return nil, err
	}
	return submitted(w, "/v1/jobs/"+job.ID, created, api.JobSubmitResponse{ID: job.ID, State: job.State, Index: index}), nil
}

func (h *Handler) listJobs(w http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	limit, err := listLimit(q.Get("limit"))
	if err != nil {
		return nil, err
	}
	list, err := h.backend.ListJobs(q.Get("after"), limit)
	if p := PrincipalOf(r.Context()); err == nil && p.scoped() {
		list.Jobs = slices.DeleteFunc(list.Jobs, func(j api.Job) bool { return !h.mayReadJob(p, j) })
	}
	return list, err
}

func (h *Handler) getJob(w http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "job")
	if err != nil {
		return nil, err
	}
	job, err := h.backend.GetJob(id)
	if err != nil {
		return nil, err
	}
	if p := PrincipalOf(r.Context()); !h.mayReadJob(p, job) {
		return nil, forbidden("%s reads the work of %v only; job %s has tasks of other submitters (or none yet)", p.Actor, p.Submitters, id)
	}
	return job, nil
}

func (h *Handler) postJobCancel(w http.ResponseWriter, r *http.Request) (any, error) {
	return h.cancelOwned(w, r, "job", func(id string) ([]string, error) {
		job, err := h.backend.GetJob(id)
		if err != nil {
			return nil, err
		}
		var submitters []string
		for _, st := range job.Stages {
			for _, t := range st.TaskIDs {
				if task, err := h.backend.GetTask(t); err == nil {
					submitters = append(submitters, task.Spec.Submitter)
				}
			}
		}
		return submitters, nil
	}, func(ctx context.Context, id, reason string) (any, error) { return h.backend.CancelJob(ctx, id, reason) })
}
