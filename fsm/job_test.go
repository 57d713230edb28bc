package fsm

import (
	"errors"
	"herd/spec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func stage(name string, deps ...string) spec.Stage {
	return spec.Stage{Name: name, DependsOn: deps, Task: testSpec("").Spec()}
}

// A job is validated whole, each error naming its stage and field; nothing is
// committed for an invalid one.
func TestJobValidation(t *testing.T) {
	withIO := func(s spec.Stage, outputs, inputs []string) spec.Stage {
		s.Outputs, s.Inputs = outputs, inputs
		return s
	}
	for name, c := range map[string]struct {
		stages []spec.Stage
		want   string
	}{
		"cycle":           {[]spec.Stage{stage("a", "c"), stage("b", "a"), stage("c", "b")}, "stages[a].depends_on: dependency cycle a → c → b → a"},
		"self":            {[]spec.Stage{stage("a", "a")}, "stages[a].depends_on: the stage depends on itself"},
		"dangling":        {[]spec.Stage{stage("a"), stage("b", "ghost")}, `stages[b].depends_on: unknown stage "ghost"`},
		"duplicate":       {[]spec.Stage{stage("a"), stage("a")}, "stages[a].name: is used by two stages"},
		"bad input":       {[]spec.Stage{withIO(stage("a"), []string{"raw.bin"}, nil), withIO(stage("b", "a"), nil, []string{"a.nope"})}, `stages[b].inputs: "a.nope": stage a declares no output "nope"`},
		"not a dep":       {[]spec.Stage{withIO(stage("a"), []string{"raw.bin"}, nil), withIO(stage("b"), nil, []string{"a.raw.bin"})}, `stages[b].inputs: "a.raw.bin": the stage does not depend on a`},
		"no stages":       {nil, "stages: a job needs at least one stage"},
		"bad output":      {[]spec.Stage{withIO(stage("a"), []string{"x/y"}, nil)}, `stages[a].outputs[0]: dataset name "x/y"`},
		"colon in output": {[]spec.Stage{withIO(stage("a"), []string{"x:y"}, nil)}, `stages[a].outputs[0]: "x:y": no ':'`},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			res := h.apply(MsgSubmitJob, SubmitJobRequest{ID: "j1", SubmittedAt: epoch, Spec: spec.Job{Name: "p", Stages: c.stages}})
			err, ok := res.(error)
			if !ok || !isRejection(res, RejectInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a rejection saying %q", res, c.want)
			}
			if _, err := h.f.State().Job("j1"); err == nil {
				t.Fatal("an invalid job was committed")
			}
			if tasks, _ := h.f.State().Tasks(TaskFilter{}); len(tasks) != 0 {
				t.Fatalf("an invalid job created %d tasks", len(tasks))
			}
		})
	}
}

// A diamond with a fan-out: stages start when everything they depend on
// succeeded, a fan-in stage reads every instance's output, a failed stage
// fails the job and cancels the rest; with on_failure continue the
// independent branch finishes.
func TestJobAdvancesThroughItsDAG(t *testing.T) {
	h := newProfileHarness(t, "n1")
	split := stage("split")
	split.Count, split.Outputs = 3, []string{"part"}
	merge := stage("merge", "split")
	merge.Inputs = []string{"split.part"}
	js := spec.Job{Name: "diamond", IdempotencyKey: "k1", Stages: []spec.Stage{split, merge, stage("side")}}
	res, ok := h.apply(MsgSubmitJob, SubmitJobRequest{ID: "j1", SubmittedAt: h.now, Spec: js}).(*JobResult)
	if !ok || !res.Created || res.Job.State != JobRunning {
		t.Fatalf("submit: %#v", res)
	}
	if again, _ := h.apply(MsgSubmitJob, SubmitJobRequest{ID: "j2", SubmittedAt: h.now, Spec: js}).(*JobResult); again == nil || again.Created || again.Job.ID != "j1" {
		t.Fatalf("the same key again: %#v", again)
	}
	j := res.Job
	if j.Stages[0].State != StageRunning || len(j.Stages[0].TaskIDs) != 3 || j.Stages[1].State != StageWaiting || j.Stages[2].State != StageRunning {
		t.Fatalf("stages at submit: %+v", j.Stages)
	}
	for i, id := range j.Stages[0].TaskIDs {
		h.runTask(id, "", "n1", time.Second, AttemptSucceeded)
		j, _ = h.f.State().Job("j1")
		if i < 2 && j.Stages[1].State != StageWaiting {
			t.Fatalf("merge started before every split instance succeeded: %+v", j.Stages)
		}
	}
	if j.Stages[0].State != StageSucceeded || j.Stages[1].State != StageRunning {
		t.Fatalf("after split: %+v", j.Stages)
	}
	mt, _ := h.f.State().Task(j.Stages[1].TaskIDs[0])
	if len(mt.Spec.Inputs) != 3 || mt.Spec.Inputs[2] != "j1.0.2:part" || mt.Spec.InputPaths[2] != "split/2/part" || mt.Spec.Env["HERD_STAGE"] != "merge" {
		t.Fatalf("merge's inputs %v at %v, env %v", mt.Spec.Inputs, mt.Spec.InputPaths, mt.Spec.Env)
	}
	h.runTask(mt.ID, "", "n1", time.Second, AttemptSucceeded)
	if j, _ = h.f.State().Job("j1"); j.State != JobRunning {
		t.Fatalf("the side stage still runs: %s", j.State)
	}
	h.runTask(j.Stages[2].TaskIDs[0], "", "n1", time.Second, AttemptSucceeded)
	if j, _ = h.f.State().Job("j1"); j.State != JobSucceeded {
		t.Fatalf("every stage succeeded, the job is %s: %+v", j.State, j.Stages)
	}

	// A failure: the job fails and its other live stage is cancelled.
	one := stage("one")
	one.Task.MaxAttempts = new(int)
	*one.Task.MaxAttempts = 1
	res = h.apply(MsgSubmitJob, SubmitJobRequest{ID: "j3", SubmittedAt: h.now, Spec: spec.Job{Name: "f", Stages: []spec.Stage{one, stage("two"), stage("after", "one")}}}).(*JobResult)
	h.runTask(res.Job.Stages[0].TaskIDs[0], "", "n1", time.Millisecond, AttemptFailed)
	j, _ = h.f.State().Job("j3")
	if j.State != JobFailed || j.Stages[1].State != StageCancelled || j.Stages[2].State != StageCancelled {
		t.Fatalf("after a failed stage: %s %+v", j.State, j.Stages)
	}
	if two, _ := h.f.State().Task(j.Stages[1].TaskIDs[0]); two.State != TaskCancelled {
		t.Fatalf("the other stage's task is %s", two.State)
	}
	// With on_failure continue the independent branch finishes.
	res = h.apply(MsgSubmitJob, SubmitJobRequest{ID: "j4", SubmittedAt: h.now, Spec: spec.Job{Name: "c", OnFailure: spec.OnFailureContinue, Stages: []spec.Stage{one, stage("two"), stage("after", "one")}}}).(*JobResult)
	h.runTask(res.Job.Stages[0].TaskIDs[0], "", "n1", time.Millisecond, AttemptFailed)
	j, _ = h.f.State().Job("j4")
	if j.State != JobRunning || j.Stages[2].State != StageSkipped || j.Stages[1].State != StageRunning {
		t.Fatalf("continue: %s %+v", j.State, j.Stages)
	}
	h.runTask(j.Stages[1].TaskIDs[0], "", "n1", time.Second, AttemptSucceeded)
	if j, _ = h.f.State().Job("j4"); j.State != JobFailed {
		t.Fatalf("continue ends FAILED once the branches finished: %s", j.State)
	}
	// Cancelling a job cancels its live stages.
	res = h.apply(MsgSubmitJob, SubmitJobRequest{ID: "j5", SubmittedAt: h.now, Spec: spec.Job{Name: "x", Stages: []spec.Stage{stage("a"), stage("b", "a")}}}).(*JobResult)
	cj, ok := h.apply(MsgCancelJob, CancelJobRequest{JobID: "j5", Now: h.now}).(*JobResult)
	if !ok || cj.Job.State != JobCancelled || cj.Job.Stages[0].State != StageCancelled || cj.Job.Stages[1].State != StageCancelled {
		t.Fatalf("cancel: %#v", cj)
	}
	if a, _ := h.f.State().Task(res.Job.Stages[0].TaskIDs[0]); a.State != TaskCancelled {
		t.Fatalf("the cancelled job's task is %s", a.State)
	}
}

// A schedule's slots only move forward: the same slot never fires twice,
// whoever proposes it; overlap forbid skips a slot while the previous
// run lives, replace cancels it, allow runs beside it; cancelling the
// schedule cancels its live run.
func TestScheduledJobFiresEachSlotOnce(t *testing.T) {
	h := newProfileHarness(t, "n1")
	js := spec.Job{Name: "tick", Stages: []spec.Stage{stage("a")}, Schedule: &spec.Schedule{Cron: "@every 2s"}}
	res := h.apply(MsgSubmitJob, SubmitJobRequest{ID: "s1", SubmittedAt: h.now, Spec: js}).(*JobResult)
	if res.Job.State != JobScheduled || len(res.Job.Stages) != 0 {
		t.Fatalf("scheduled job: %+v", res.Job)
	}
	if tasks, _ := h.f.State().Tasks(TaskFilter{}); len(tasks) != 0 {
		t.Fatalf("a scheduled job ran at submission: %d tasks", len(tasks))
	}
	fire := func(slot time.Duration, run bool) any {
		return h.apply(MsgFireJob, FireJobRequest{JobID: "s1", Slot: epoch.Add(slot), Run: run, Outcome: "on time", Now: epoch.Add(slot)})
	}
	first, ok := fire(2*time.Second, true).(*JobResult)
	if !ok || first.Job.LastRun != "s1@"+strconv.FormatInt(epoch.Add(2*time.Second).Unix(), 10) {
		t.Fatalf("first firing: %#v", first)
	}
	if res := fire(2*time.Second, true); !isRejection(res, RejectConflict) {
		t.Fatalf("the same slot again: %v", res)
	}
	if res := fire(time.Second, true); !isRejection(res, RejectConflict) {
		t.Fatalf("an earlier slot: %v", res)
	}
	// The run still lives: forbid skips the next slot.
	second := fire(4*time.Second, true).(*JobResult)
	if second.Created || !strings.HasPrefix(second.Job.Firings[1].Outcome, "skipped: run") {
		t.Fatalf("forbid: %+v", second.Job.Firings)
	}
	// Replace cancels the live run.
	rspec := js
	rspec.Schedule = &spec.Schedule{Cron: "@every 2s", Overlap: spec.OverlapReplace}
	h.apply(MsgSubmitJob, SubmitJobRequest{ID: "s2", SubmittedAt: h.now, Spec: rspec})
	fireS2 := func(slot time.Duration) *JobResult {
		return h.apply(MsgFireJob, FireJobRequest{JobID: "s2", Slot: epoch.Add(slot), Run: true, Outcome: "on time", Now: epoch.Add(slot)}).(*JobResult)
	}
	r1, r2 := fireS2(2*time.Second), fireS2(4*time.Second)
	if prev, _ := h.f.State().Job(r1.Job.LastRun); prev.State != JobCancelled || r2.Job.LastRun == r1.Job.LastRun {
		t.Fatalf("replace: previous run %s, last run %s", prev.State, r2.Job.LastRun)
	}
	third := fire(6*time.Second, true).(*JobResult)
	// A skipped slot starts nothing and is recorded.
	skipped := fire(8*time.Second, false).(*JobResult)
	if skipped.Created || skipped.Job.LastRun != third.Job.LastRun {
		t.Fatalf("skip: %+v", skipped.Job)
	}
	cj := h.apply(MsgCancelJob, CancelJobRequest{JobID: "s1", Now: h.now}).(*JobResult)
	if run, _ := h.f.State().Job(third.Job.LastRun); cj.Job.State != JobCancelled || run.State != JobCancelled {
		t.Fatalf("cancel of the schedule: %s, its run %s", cj.Job.State, run.State)
	}
	if res := fire(10*time.Second, true); !isRejection(res, RejectConflict) {
		t.Fatalf("a cancelled schedule fired: %v", res)
	}
	// The active jobs are the schedule still standing and its live run,
	// not the cancelled schedule and runs beside them; a restore rebuilds
	// the same list.
	want := []string{"s2", r2.Job.LastRun}
	if got := jobIDs(h.f.State().ActiveJobs()); !slices.Equal(got, want) {
		t.Fatalf("active jobs %v, want %v (all: %v)", got, want, jobIDs(h.f.State().Jobs("", 0)))
	}
	g := restoredCopy(t, h.f)
	if got := jobIDs(g.State().ActiveJobs()); !slices.Equal(got, want) {
		t.Fatalf("active jobs after a restore %v, want %v", got, want)
	}
}

func jobIDs(jobs []*Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// A for_each stage makes one task per item, with the item in HERD_ITEM.
func TestForEachStage(t *testing.T) {
	h := newProfileHarness(t, "n1")
	each := stage("resize")
	each.ForEach = []string{"cam-1", "cam-2"}
	res := h.apply(MsgSubmitJob, SubmitJobRequest{ID: "j1", SubmittedAt: h.now, Spec: spec.Job{Name: "each", Stages: []spec.Stage{each}}}).(*JobResult)
	if ids := res.Job.Stages[0].TaskIDs; len(ids) != 2 {
		t.Fatalf("tasks %v", ids)
	}
	for k, item := range each.ForEach {
		task, _ := h.f.State().Task(res.Job.Stages[0].TaskIDs[k])
		if task.Spec.Env["HERD_ITEM"] != item || task.Spec.Name != "each/resize/"+strconv.Itoa(k) {
			t.Fatalf("instance %d: env %v, name %q", k, task.Spec.Env, task.Spec.Name)
		}
	}
	both := stage("both")
	both.ForEach, both.Count = []string{"x"}, 2
	if res := h.apply(MsgSubmitJob, SubmitJobRequest{ID: "j2", SubmittedAt: h.now, Spec: spec.Job{Name: "bad", Stages: []spec.Stage{both}}}); !isRejection(res, RejectInvalid) {
		t.Fatalf("count and for_each together: %v", res)
	}
}

// Retention leaves a running job's finished tasks alone: the job counts
// its stage's tasks to end the stage. Once the job ends they go too.
func TestRetentionKeepsTheTasksOfALiveJob(t *testing.T) {
	h := newProfileHarness(t, "n1")
	wide := stage("wide")
	wide.Count = 2
	res := h.apply(MsgSubmitJob, SubmitJobRequest{ID: "j1", SubmittedAt: h.now, Spec: spec.Job{Name: "p", Stages: []spec.Stage{wide}}}).(*JobResult)
	ids := res.Job.Stages[0].TaskIDs
	h.submit("plain", testSpec("").Resources, 1)
	h.runTask("plain", "", "n1", time.Second, AttemptSucceeded)
	h.runTask(ids[0], "", "n1", time.Second, AttemptSucceeded)
	later := h.now.Add(time.Hour)
	if got, _ := h.f.State().FinishedTasks(later, 100); !slices.Equal(got, []string{"plain"}) {
		t.Fatalf("finished tasks while the job runs: %v, want only the plain task", got)
	}
	h.runTask(ids[1], "", "n1", time.Second, AttemptSucceeded)
	if j, _ := h.f.State().Job("j1"); j.State != JobSucceeded {
		t.Fatalf("the job is %s after its last task", j.State)
	}
	got, _ := h.f.State().FinishedTasks(later, 100)
	slices.Sort(got)
	if want := append([]string{"plain"}, ids...); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("finished tasks once the job ended: %v, want %v", got, want)
	}
}

// A scheduled job's key keeps naming the schedule once runs, which
// carry its spec, have changed: submitting it again returns the
// schedule.
func TestScheduledJobKeyNamesTheSchedule(t *testing.T) {
	h := newProfileHarness(t, "n1")
	js := spec.Job{Name: "tick", IdempotencyKey: "nightly", Stages: []spec.Stage{stage("a")}, Schedule: &spec.Schedule{Cron: "@every 2s"}}
	h.apply(MsgSubmitJob, SubmitJobRequest{ID: "s1", SubmittedAt: h.now, Spec: js})
	fired, ok := h.apply(MsgFireJob, FireJobRequest{JobID: "s1", Slot: epoch.Add(2 * time.Second), Run: true, Outcome: "on time", Now: epoch.Add(2 * time.Second)}).(*JobResult)
	if !ok || fired.Job.LastRun == "" {
		t.Fatalf("firing: %#v", fired)
	}
	run, _ := h.f.State().Job(fired.Job.LastRun)
	h.runTask(run.Stages[0].TaskIDs[0], "", "n1", time.Second, AttemptSucceeded)
	if run, _ = h.f.State().Job(run.ID); run.State != JobSucceeded {
		t.Fatalf("the run is %s", run.State)
	}
	again, ok := h.apply(MsgSubmitJob, SubmitJobRequest{ID: "s2", SubmittedAt: h.now, Spec: js}).(*JobResult)
	if !ok || again.Created || again.Job.ID != "s1" {
		t.Fatalf("the key again after a run: %#v, want the schedule s1", again)
	}
	if j, err := h.f.State().JobByIdempotencyKey("nightly"); err != nil || j.ID != "s1" {
		t.Fatalf("the key names %v (%v)", j, err)
	}
}

// Retention forgets a finished job once its tasks are forgotten, and its
// key with it; a job still running, or one whose tasks are left, stays.
func TestForgetFinishedJobs(t *testing.T) {
	h := newProfileHarness(t, "n1")
	submit := func(id, key string) *Job {
		res, ok := h.apply(MsgSubmitJob, SubmitJobRequest{ID: id, SubmittedAt: h.now, Spec: spec.Job{Name: "p", IdempotencyKey: key, Stages: []spec.Stage{stage("a")}}}).(*JobResult)
		if !ok {
			t.Fatalf("submit %s failed", id)
		}
		return res.Job
	}
	done, live := submit("done", "k-done"), submit("live", "")
	h.runTask(done.Stages[0].TaskIDs[0], "", "n1", time.Second, AttemptSucceeded)
	later := h.now.Add(time.Hour)
	if got := h.f.State().FinishedJobs(later, 100); len(got) != 0 {
		t.Fatalf("jobs listed while their tasks are kept: %v", got)
	}
	if n := h.apply(MsgForgetJobs, ForgetJobsRequest{JobIDs: []string{"done", "live", "ghost"}}); n != 0 {
		t.Fatalf("forgot %v jobs whose tasks are kept or which run", n)
	}
	tasks, _ := h.f.State().FinishedTasks(later, 100)
	if n := h.apply(MsgForgetTasks, ForgetTasksRequest{TaskIDs: tasks}); n != 1 {
		t.Fatalf("forgot %v tasks, want the finished job's one", n)
	}
	if got := h.f.State().FinishedJobs(later, 100); !slices.Equal(got, []string{"done"}) {
		t.Fatalf("finished jobs %v, want [done]", got)
	}
	if got := h.f.State().FinishedJobs(h.now, 100); len(got) != 0 {
		t.Fatalf("a job finished after the cutoff was listed: %v", got)
	}
	if n := h.apply(MsgForgetJobs, ForgetJobsRequest{JobIDs: []string{"done", "live"}}); n != 1 {
		t.Fatalf("forgot %v jobs, want 1", n)
	}
	if _, err := h.f.State().Job("done"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the forgotten job: %v", err)
	}
	if j, _ := h.f.State().Job(live.ID); j == nil || j.State != JobRunning {
		t.Fatalf("the running job: %+v", j)
	}
	if again := submit("done2", "k-done"); again.ID != "done2" {
		t.Fatalf("the forgotten job's key still answers with %s", again.ID)
	}
}
