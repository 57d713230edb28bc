package httpapi

import (
	"herd/api"
	"herd/spec"
	"net/http"
	"slices"
)

// A token limited to named submitters (a team's: `herd acl token create
// -submitter team-x`) acts for those submitters only, reads included: it
// reads, lists, explains and follows the logs and events of its own
// submitters' tasks, and of jobs whose every task is theirs, and gets 403
// for another team's. Nodes, servers and the cluster's state are the
// whole site's and stay readable to any reader.

// scoped reports whether p reads only some submitters' work.
func (p Principal) scoped() bool {
	return !p.open && !slices.Contains(p.policies, "management") && len(p.Submitters) > 0
}

// mayReadTask reports whether p may read task.
func (p Principal) mayReadTask(task api.Task) bool {
	return !p.scoped() || p.MaySubmitAs(submitterOf(task))
}

func submitterOf(task api.Task) string {
	if task.Spec.Submitter == "" {
		return spec.DefaultSubmitter
	}
	return task.Spec.Submitter
}

// mayReadJob reports whether p may read job: every one of its tasks is
// p's to read (a job with no task yet, a schedule's definition, is read
// by unscoped readers only).
func (h *Handler) mayReadJob(p Principal, job api.Job) bool {
	if !p.scoped() {
		return true
	}
	seen := false
	for _, st := range job.Stages {
		for _, id := range st.TaskIDs {
			task, err := h.backend.GetTask(id)
			if err != nil {
				continue
			}
			if !p.mayReadTask(task) {
				return false
			}
			seen = true
		}
	}
	return seen
}

// checkReadTask refuses a scoped caller another team's task.
func (h *Handler) checkReadTask(r *http.Request, id string) error {
	p := PrincipalOf(r.Context())
	if !p.scoped() {
		return nil
	}
	task, err := h.backend.GetTask(id)
	if err != nil {
		return err
	}
	if !p.mayReadTask(task) {
		return forbidden("%s reads the work of %v only; task %s is %s's", p.Actor, p.Submitters, id, submitterOf(task))
	}
	return nil
}

// mayReadEvent reports whether p may see ev: a task's or a job's events
// as the task or job, everything else (nodes, servers) always.
func (h *Handler) mayReadEvent(p Principal, ev api.Event) bool {
	if !p.scoped() {
		return true
	}
	switch ev.Topic {
	case "task":
		task, err := h.backend.GetTask(ev.Key)
		return err == nil && p.mayReadTask(task)
	case "job":
		job, err := h.backend.GetJob(ev.Key)
		return err == nil && h.mayReadJob(p, job)
	}
	return true
}
