package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"

	"herd/api"
	"herd/spec"
)

func runJob(e *env, args []string) error {
	return subcommands(e, "job", args, []command{
		{"run", "submit a job (a DAG of stages) from an HCL or JSON file: job run FILE [-wait]", runJobRun},
		{"status", "show a job's DAG with each stage's state, nodes and attempts", runJobStatus},
		{"list", "list jobs", runJobList},
		{"cancel", "cancel a job and its live stages", runJobCancel},
	})
}

// The HCL form of a job file (see docs/pipelines.md).
type hclJob struct {
	Name           string       `hcl:"name,optional"`
	IdempotencyKey string       `hcl:"idempotency_key,optional"`
	OnFailure      string       `hcl:"on_failure,optional"`
	Schedule       *hclSchedule `hcl:"schedule,block"`
	Stages         []hclStage   `hcl:"stage,block"`
}

type hclSchedule struct {
	Cron     string `hcl:"cron"`
	TimeZone string `hcl:"time_zone,optional"`
	CatchUp  string `hcl:"catch_up,optional"`
	Overlap  string `hcl:"overlap,optional"`
}

type hclStage struct {
	Name      string   `hcl:"name,label"`
	DependsOn []string `hcl:"depends_on,optional"`
	Count     int      `hcl:"count,optional"`
	ForEach   []string `hcl:"for_each,optional"`
	Outputs   []string `hcl:"outputs,optional"`
	Inputs    []string `hcl:"inputs,optional"`
	Task      hclTask  `hcl:"task,block"`
}

type hclTask struct {
	Command         []string          `hcl:"command"`
	Env             map[string]string `hcl:"env,optional"`
	Priority        *int              `hcl:"priority,optional"`
	Capability      string            `hcl:"capability,optional"`
	RequiredLabels  map[string]string `hcl:"required_labels,optional"`
	PreferredLabels map[string]string `hcl:"preferred_labels,optional"`
	CPUMillis       int64             `hcl:"cpu_millis,optional"`
	MemoryMB        int64             `hcl:"memory_mb,optional"`
	GPU             int64             `hcl:"gpu,optional"`
	DiskMB          int64             `hcl:"disk_mb,optional"`
	Timeout         string            `hcl:"timeout,optional"`
	MaxAttempts     *int              `hcl:"max_attempts,optional"`
	Submitter       string            `hcl:"submitter,optional"`
	Class           string            `hcl:"class,optional"`
	Size            string            `hcl:"size,optional"`
	Driver          string            `hcl:"driver,optional"`
	Image           string            `hcl:"image,optional"`
	Network         string            `hcl:"network,optional"`
	Speculative     bool              `hcl:"speculative,optional"`
}

// parseJobFile reads a job from HCL, or JSON in the API's form (a file
// whose first character is '{').
func parseJobFile(name string, src []byte) (api.JobSpec, error) {
	if trimmed := strings.TrimSpace(string(src)); strings.HasPrefix(trimmed, "{") {
		var job api.JobSpec
		dec := json.NewDecoder(strings.NewReader(trimmed))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&job); err != nil {
			return api.JobSpec{}, fmt.Errorf("%s: %w", name, jsonDecodeError(err, job))
		}
		return job, nil
	}
	file, diags := hclparse.NewParser().ParseHCL(src, name)
	if diags.HasErrors() {
		return api.JobSpec{}, fmt.Errorf("%s (a job file is HCL, stage \"NAME\" { task { command = [...] } } blocks, or JSON in the API's form, starting with '{': see docs/pipelines.md)", diags.Error())
	}
	var j hclJob
	if diags := gohcl.DecodeBody(file.Body, nil, &j); diags.HasErrors() {
		return api.JobSpec{}, fmt.Errorf("%s", hcl.Diagnostics(diags).Error())
	}
	job := api.JobSpec{Name: j.Name, IdempotencyKey: j.IdempotencyKey, OnFailure: j.OnFailure}
	if sc := j.Schedule; sc != nil {
		job.Schedule = &api.Schedule{Cron: sc.Cron, TimeZone: sc.TimeZone, CatchUp: sc.CatchUp, Overlap: sc.Overlap}
	}
	for _, st := range j.Stages {
		t := st.Task
		task := api.TaskSpec{
			Command: t.Command, Env: t.Env, Priority: t.Priority, RequiredLabels: t.RequiredLabels, PreferredLabels: t.PreferredLabels,
			Resources:   api.Resources{CPUMillis: t.CPUMillis, MemoryMB: t.MemoryMB, GPU: t.GPU, DiskMB: t.DiskMB},
			MaxAttempts: t.MaxAttempts, Submitter: t.Submitter, Class: t.Class, Size: t.Size,
			Driver: t.Driver, Image: t.Image, Network: t.Network, Speculative: t.Speculative,
		}
		if t.Capability != "" {
			capName, capVersion, err := spec.ParseCapability(t.Capability)
			if err != nil {
				return api.JobSpec{}, fmt.Errorf("%s: stage %s: %w", name, st.Name, err)
			}
			task.Capability, task.CapabilityVersion = capName, capVersion
		}
		if t.Timeout != "" {
			secs, err := spec.ParseTimeout(t.Timeout)
			if err != nil {
				return api.JobSpec{}, fmt.Errorf("%s: stage %s: %w", name, st.Name, err)
			}
			task.TimeoutSeconds = &secs
		}
		job.Stages = append(job.Stages, api.StageSpec{
			Name: st.Name, DependsOn: st.DependsOn, Count: st.Count, ForEach: st.ForEach, Outputs: st.Outputs, Inputs: st.Inputs, Task: task,
		})
	}
	return job, nil
}

func runJobRun(e *env, args []string) error {
	fs := newFlags(e, "job run", "FILE", "Submit a job, a DAG of stages, from an HCL file (or JSON in the API's form; - reads stdin).\nWith -wait, follow it to its end: exit 0 when it SUCCEEDED, 1 otherwise.")
	var cf clientFlags
	cf.register(e, fs, true)
	wait := fs.Bool("wait", false, "wait for the job to end, showing its stages as they move")
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("job run takes exactly one file")
	}
	var src []byte
	var err error
	if fs.Arg(0) == "-" {
		src, err = io.ReadAll(e.stdin)
	} else {
		src, err = os.ReadFile(fs.Arg(0))
	}
	if err != nil {
		return fmt.Errorf("job run: %w", err)
	}
	spec, err := parseJobFile(fs.Arg(0), src)
	if err != nil {
		return usagef("%v", err)
	}
	cl, err := cf.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	res, err := cl.SubmitJob(ctx, spec)
	cancel()
	if err != nil {
		return fmt.Errorf("job run: %w", err)
	}
	if !*wait {
		if cf.structured() {
			return cf.print(e.stdout, res)
		}
		fmt.Fprintf(e.stdout, "Job %s submitted, %s (index %d)\n", res.ID, res.State, res.Index)
		return nil
	}
	last := ""
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		j, _, err := cl.GetJob(ctx, res.ID, api.ReadOptions{Consistent: true})
		cancel()
		if err != nil {
			return fmt.Errorf("job run: %w", err)
		}
		if line := stagesLine(j); line != last && !cf.structured() {
			fmt.Fprintf(e.stdout, "%s %s: %s\n", time.Now().Format(time.TimeOnly), j.State, line)
			last = line
		}
		switch j.State {
		case api.JobSucceeded:
			if cf.structured() {
				return cf.print(e.stdout, j)
			}
			return nil
		case api.JobFailed, api.JobCancelled:
			if cf.structured() {
				_ = cf.print(e.stdout, j)
			}
			return fmt.Errorf("job %s ended %s", j.ID, j.State)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func stagesLine(j api.Job) string {
	parts := make([]string, len(j.Stages))
	for i, s := range j.Stages {
		parts[i] = s.Name + " " + s.State
	}
	return strings.Join(parts, ", ")
}

func runJobStatus(e *env, args []string) error {
	rc, err := startRead(e, "job status", "Show a job: its DAG, each stage's state, the node and attempts of each of its tasks, and its timeline.", "job id", args)
	if err != nil {
		return err
	}
	cf, cl := rc.cf, rc.cl
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j, _, err := cl.GetJob(ctx, rc.id, rc.opts)
	if err != nil {
		return fmt.Errorf("job status: %w", err)
	}
	if cf.structured() {
		return cf.print(e.stdout, j)
	}
	fmt.Fprintf(e.stdout, "Job %s (%s): %s\n", j.ID, j.Name, j.State)
	if j.ScheduledBy != "" {
		fmt.Fprintf(e.stdout, "A run of scheduled job %s\n", j.ScheduledBy)
	}
	if sc := j.Schedule; sc != nil {
		fmt.Fprintf(e.stdout, "Schedule %q, time zone %s, catch up %s, overlap %s\n", sc.Cron, or(sc.TimeZone, "UTC"), or(sc.CatchUp, "skip"), or(sc.Overlap, "forbid"))
		if !j.NextFiring.IsZero() {
			fmt.Fprintf(e.stdout, "Next firing %s (in %s)\n", j.NextFiring.Local().Format(time.DateTime), time.Until(j.NextFiring).Round(time.Second))
		}
		if len(j.Firings) > 0 {
			fmt.Fprintln(e.stdout, "\nFirings")
			ft := &table{}
			ft.add("SLOT", "FIRED", "RUN", "OUTCOME")
			for _, f := range j.Firings {
				run := f.Run
				if run == "" {
					run = "-"
				}
				ft.add(f.Slot.Local().Format(time.DateTime), ago(f.At), run, f.Outcome)
			}
			ft.write(e.stdout)
		}
		fmt.Fprintln(e.stdout)
		fmt.Fprintln(e.stdout, "Stages of each run")
	}
	fmt.Fprintln(e.stdout)
	writeDAG(e.stdout, j)
	if len(j.Timeline) > 0 {
		fmt.Fprintln(e.stdout, "\nTimeline")
		tl := &table{}
		tl.add("TIME", "INDEX", "EVENT", "DETAIL")
		for _, ev := range j.Timeline {
			tl.add(ago(ev.Time), strconv.FormatUint(ev.Index, 10), ev.Kind, ev.Message)
		}
		tl.write(e.stdout)
	}
	return nil
}

// writeDAG draws the stages in layers: a stage sits one layer below the
// deepest stage it depends on, with an arrow from each dependency, its
// state, and each task's state, node and attempts.
func writeDAG(w io.Writer, j api.Job) {
	depth := map[string]int{}
	var level func(name string) int
	byName := map[string]api.JobStage{}
	for _, s := range j.Stages {
		byName[s.Name] = s
	}
	level = func(name string) int {
		if d, ok := depth[name]; ok {
			return d
		}
		d := 0
		for _, dep := range byName[name].DependsOn {
			d = max(d, level(dep)+1)
		}
		depth[name] = d
		return d
	}
	maxDepth := 0
	for _, s := range j.Stages {
		maxDepth = max(maxDepth, level(s.Name))
	}
	for d := 0; d <= maxDepth; d++ {
		for _, s := range j.Stages {
			if depth[s.Name] != d {
				continue
			}
			indent := strings.Repeat("    ", d)
			from := ""
			if len(s.DependsOn) > 0 {
				from = strings.Join(s.DependsOn, ", ") + " ──▶ "
			}
			fmt.Fprintf(w, "%s%s[%s] %s\n", indent, from, s.Name, s.State)
			for _, t := range s.Tasks {
				node := t.NodeID
				if node == "" {
					node = "-"
				}
				fmt.Fprintf(w, "%s    %s %s on %s, %d attempt(s)\n", indent, t.ID, t.State, node, t.Attempts)
			}
		}
	}
}

func runJobList(e *env, args []string) error {
	rc, err := startRead(e, "job list", "List jobs in submission order.", "", args)
	if err != nil {
		return err
	}
	cf, cl := rc.cf, rc.cl
	return cf.watchOr(e, cl, "job", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		list, _, err := cl.ListJobs(ctx, "", api.DefaultListLimit, rc.opts)
		if err != nil {
			return fmt.Errorf("job list: %w", err)
		}
		if cf.structured() {
			return cf.print(e.stdout, list)
		}
		tb := &table{}
		tb.add("ID", "NAME", "STATE", "SUBMITTED", "STAGES")
		for _, j := range list.Jobs {
			tb.add(j.ID, j.Name, j.State, ago(j.SubmittedAt), stagesLine(j))
		}
		tb.write(e.stdout)
		return nil
	})
}

func runJobCancel(e *env, args []string) error {
	c := newClientCommand(e, "job cancel", "ID", "Cancel a job: its live stages' tasks are cancelled, its waiting stages never start.", true)
	fs, cf := c.fs, &c.cf
	reason := fs.String("reason", "", "why, recorded in the job's timeline")
	cl, err := c.start(e, args, 1, "job cancel takes exactly one job id")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j, err := cl.CancelJob(ctx, fs.Arg(0), *reason)
	if err != nil {
		return fmt.Errorf("job cancel: %w", err)
	}
	if cf.structured() {
		return cf.print(e.stdout, j)
	}
	fmt.Fprintf(e.stdout, "Job %s is %s\n", j.ID, j.State)
	return nil
}
