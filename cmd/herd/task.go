package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"herd/api"
	"herd/spec"
)

func runTask(e *env, args []string) error {
	return subcommands(e, "task", args, []command{
		{"submit", "submit a task: herd task submit [flags] -- CMD ARGS…", runTaskSubmit},
		{"run", "run a command as a task and wait, its output streamed: herd task run [flags] CMD ARGS…", runTaskRun},
		{"status", "show a task with its attempts and timeline", runTaskStatus},
		{"list", "list tasks", runTaskList},
		{"cancel", "cancel a task; its running process is killed", runTaskCancel},
		{"logs", "print (-f: follow) an attempt's log from the node that ran it", runTaskLogs},
	})
}

// specFlags registers the flags that describe a task (shared by task
// submit and explain) and returns a function that builds the spec.
func specFlags(fs *flag.FlagSet) func(command []string) (api.TaskSpec, error) {
	name := fs.String("name", "", "task name (default: its id)")
	key := fs.String("key", "", "idempotency key: the same key returns the same task")
	priority := fs.Int("priority", spec.DefaultPriority, "priority 0..100, higher first")
	capability := fs.String("capability", spec.DefaultCapability+"@"+spec.DefaultCapabilityVersion, "required capability as name@version")
	cpu := fs.Int64("cpu", 0, "CPU in millicores")
	mem := fs.Int64("memory", 0, "memory in MB")
	gpu := fs.Int64("gpu", 0, "GPU units")
	disk := fs.Int64("disk", 0, "disk in MB")
	timeout := fs.Duration("timeout", time.Duration(spec.DefaultTimeoutSeconds)*time.Second, "run timeout")
	maxAttempts := fs.Int("max-attempts", spec.DefaultMaxAttempts, "attempts before the task fails")
	submitter := fs.String("submitter", spec.DefaultSubmitter, "submitter, for fair sharing")
	onDisconnect := fs.String("on-disconnect", spec.OnDisconnectStop, "when the node is cut off past its lease: stop the attempt, or keep_running (work safe to run twice)")
	class := fs.String("class", "", "task class: run times compare within a class (default: the task's name)")
	size := fs.String("size", "", "small, medium or large: the tiers the task may run on (server settings scheduler.size_*)")
	image := fs.String("image", "", "run the command in a container from this OCI image: a registry reference, or oci-layout:PATH[:TAG] on the node")
	drv := fs.String("driver", "", "exec (a process on the node) or oci (a container; the default with -image)")
	netMode := fs.String("network", "", "an oci task's network: host (the default) or none")
	speculative := fs.Bool("speculative", false, "once the attempt runs past 5× its class's median, start a backup on another node; the first to succeed wins")
	var inputs, outputs listFlag
	fs.Var(&inputs, "input", "dataset the task reads; nodes holding it are preferred (repeatable)")
	fs.Var(&outputs, "output", "file the task leaves in its working directory, kept on its node as a dataset (repeatable)")
	labels, prefer, envs := kvFlag{}, kvFlag{}, kvFlag{}
	fs.Var(labels, "label", "required node label key=value (repeatable)")
	fs.Var(prefer, "prefer", "preferred node label key=value (repeatable)")
	fs.Var(envs, "env", "environment variable K=V (repeatable)")
	return func(command []string) (api.TaskSpec, error) {
		capName, capVersion, err := spec.ParseCapability(*capability)
		if err != nil {
			return api.TaskSpec{}, usagef("-capability: %v", err)
		}
		secs, err := spec.TimeoutSeconds(*timeout)
		if err != nil {
			return api.TaskSpec{}, usagef("-timeout: %v", err)
		}
		task := api.TaskSpec{
			Name: *name, IdempotencyKey: *key, Priority: priority, Command: command,
			Capability: capName, CapabilityVersion: capVersion,
			Resources:      api.Resources{CPUMillis: *cpu, MemoryMB: *mem, GPU: *gpu, DiskMB: *disk},
			TimeoutSeconds: &secs, MaxAttempts: maxAttempts, Submitter: *submitter, OnDisconnect: *onDisconnect,
			Class: *class, Size: *size, Inputs: inputs, Outputs: outputs,
			Driver: *drv, Image: *image, Network: *netMode, Speculative: *speculative,
		}
		if len(labels) > 0 {
			task.RequiredLabels = labels
		}
		if len(prefer) > 0 {
			task.PreferredLabels = prefer
		}
		if len(envs) > 0 {
			task.Env = envs
		}
		return task, nil
	}
}

func runTaskSubmit(e *env, args []string) error {
	return submitTask(e, args, false)
}

// runTaskRun is task submit -wait -logs: the task's output streams to
// standard output and herd exits with the task's exit code.
func runTaskRun(e *env, args []string) error {
	return submitTask(e, args, true)
}

func submitTask(e *env, args []string, run bool) error {
	fs := newFlags(e, "task submit", "-- CMD [ARGS…] | -f FILE", "Submit a task. It is acknowledged once committed on a quorum of replicas.\nWithout -key a random idempotency key is used, so retries never create\na second task. With -f, submit every task spec in FILE (JSON, one object\nper line, as in the API; - reads standard input) in batches.\nWith -wait, herd's words go to standard error and the task's output to\nstandard output, and herd exits with the task's exit code.")
	if run {
		fs = newFlags(e, "task run", "CMD [ARGS…]", "Run a command as a task and wait for it, as ssh would run it: its output\nstreams to standard output while it runs, herd's progress and summary go\nto standard error, and herd exits with the task's exit code.")
	}
	var cf clientFlags
	cf.register(e, fs, true)
	build := specFlags(fs)
	file, wait, logs := new(string), new(bool), new(bool)
	if !run {
		file = fs.String("f", "", "submit the task specs in this file (JSON lines; - for standard input) instead of one command")
		wait = fs.Bool("wait", false, "follow the task to its end, its progress on one line, then its summary and the last lines of its output,\nand exit with its exit code (with -f: follow every task, with a progress bar, and exit 1 unless all succeed)")
		logs = fs.Bool("logs", false, "with -wait, stream each attempt's log to standard output while it runs")
	}
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if run {
		*wait, *logs = true, true
	}
	if *logs && !*wait {
		return usagef("-logs goes with -wait")
	}
	if *file != "" {
		if fs.NArg() > 0 {
			return usagef("task submit takes either -f FILE or a command, not both")
		}
		return submitFile(e, &cf, *file, *wait)
	}
	if fs.NArg() == 0 {
		return usagef("%s needs a command, e.g. herd %s -- echo hello", fs.Name(), fs.Name())
	}
	task, err := build(fs.Args())
	if err != nil {
		return err
	}
	if task.IdempotencyKey == "" {
		task.IdempotencyKey = randomKey()
	}
	cl, err := cf.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, created, err := cl.SubmitTask(ctx, task)
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	if cf.structured() && !*wait {
		return cf.print(e.stdout, res)
	}
	verb := "Submitted"
	if !created {
		verb = "Already submitted (same idempotency key):"
	}
	says := e.stdout
	if *wait {
		says = e.stderr // standard output is the task's
	}
	fmt.Fprintf(says, "%s task %s, state %s, committed at index %d\n", verb, res.ID, res.State, res.Index)
	if *wait {
		var show func(api.Task) error
		if cf.structured() {
			// The finished task, in the form asked, is standard output.
			show = func(t api.Task) error { return cf.print(e.stdout, t) }
		}
		return waitTask(e, cl, res.ID, res.Index, *logs, show)
	}
	return nil
}

// waitTask follows a task to its end and behaves as the command would
// over ssh: what herd says (its progress: queued, waiting because…,
// reserved on a node, running, finished; then a summary with the node,
// the duration, the attempts, the exit code and why the attempt ended)
// goes to standard error, the task's own output to standard output (the
// last lines the cluster keeps at the end, or, with logs, each attempt's
// log streamed as it runs), and the command's exit status is the task's:
// 0 when it SUCCEEDED, its last attempt's exit code otherwise (1 when
// it has none). With show, standard output is the finished task as
// show writes it, instead of the task's output.
func waitTask(e *env, cl *api.Client, id string, from uint64, logs bool, show func(api.Task) error) error {
	ctx, cancel := context.WithCancel(context.Background())
	stream := &logStream{e: e, cl: cl, id: id, out: e.stdout}
	if show != nil {
		stream.out = e.stderr // standard output is the finished task's record
	}
	defer func() { cancel(); stream.wait() }()
	// The task's events wake the loop; a slow poll covers a stream that
	// cannot be had.
	wake := wakeOnEvents(ctx, cl, from, []api.EventTopicFilter{{Topic: "task", Key: id}}, nil)
	line := newStatusLine(e.stderr)
	for {
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		// From the leader: a follower may not have applied the submit yet.
		t, _, err := cl.GetTask(rctx, id, api.ReadOptions{Consistent: true})
		rcancel()
		if err != nil {
			line.done()
			return fmt.Errorf("wait: %w", err)
		}
		line.show(progressLine(t))
		if logs {
			stream.follow(ctx, t)
		}
		if terminalTask(t.State) {
			line.done()
			streamed := stream.wait()
			if show != nil {
				if err := show(t); err != nil {
					return err
				}
				streamed = true // standard output holds the task, not its output
			}
			return finishWait(e, t, streamed)
		}
		select {
		case <-wake:
		case <-time.After(2 * time.Second):
		}
	}
}

// finishWait prints a finished task's summary and, unless its log was
// streamed whole, the last lines of its output; it returns the task's
// exit status.
func finishWait(e *env, t api.Task, streamed bool) error {
	var last *api.Attempt
	if n := len(t.Attempts); n > 0 {
		last = &t.Attempts[n-1]
	}
	summary := fmt.Sprintf("task %s %s", t.ID, t.State)
	code := 0
	if last != nil {
		summary += " on " + last.NodeID
		if !last.StartedAt.IsZero() && !last.FinishedAt.IsZero() {
			summary += " in " + last.FinishedAt.Sub(last.StartedAt).Round(time.Millisecond).String()
		}
		summary += fmt.Sprintf(" (attempt %d of at most %d), exit code %d", last.Number, deref(t.Spec.MaxAttempts), last.ExitCode)
		if last.Error != "" {
			summary += ": " + last.Error
		}
		code = last.ExitCode
		if !streamed && last.OutputTail != "" {
			fmt.Fprint(e.stdout, lastLines(last.OutputTail, 10))
		}
	}
	fmt.Fprintln(e.stderr, summary)
	if t.State == api.TaskSucceeded {
		return nil
	}
	if code <= 0 {
		code = 1
	}
	return &exitWith{code: code, msg: fmt.Sprintf("task %s ended %s", t.ID, t.State)}
}

// lastLines is the end of out: its last n lines, newline-terminated.
func lastLines(out string, n int) string {
	out = strings.TrimRight(out, "\n")
	lines := strings.Split(out, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}

// logStream copies each attempt's log to standard output while the
// attempt runs, one attempt after another.
type logStream struct {
	e      *env
	out    io.Writer // where the attempts' output goes
	cl     *api.Client
	id     string
	number int // the attempt being (or last) streamed
	// broken: an attempt's log did not come whole.
	broken atomic.Bool
	done   chan struct{}
}

// follow starts streaming the task's newest attempt once it runs, when
// it is not the one streamed already.
func (s *logStream) follow(ctx context.Context, t api.Task) {
	n := len(t.Attempts)
	if n == 0 || t.Attempts[n-1].Number == s.number || t.Attempts[n-1].StartedAt.IsZero() {
		return
	}
	s.wait()
	s.number = t.Attempts[n-1].Number
	done := make(chan struct{})
	s.done = done
	number := s.number
	go func() {
		defer close(done)
		w := &logSplit{out: s.out, notes: s.e.stderr}
		defer w.flush()
		if err := s.cl.TaskLog(ctx, w, s.id, number, 0, true); err != nil {
			s.broken.Store(true)
			fmt.Fprintf(s.e.stderr, "herd: attempt %d's log: %v\n", number, err)
		}
	}()
}

// logSplit passes an attempt's log on to out, all but the lines the agent
// adds to it (its header and footer, "--- herd: …"), which go to notes.
type logSplit struct {
	out, notes io.Writer
	line       []byte
}

func (w *logSplit) Write(p []byte) (int, error) {
	for _, b := range p {
		w.line = append(w.line, b)
		if b == '\n' {
			w.flush()
		}
	}
	return len(p), nil
}

func (w *logSplit) flush() {
	if len(w.line) == 0 {
		return
	}
	to := w.out
	if bytes.HasPrefix(w.line, []byte("--- herd: ")) {
		to = w.notes
	}
	_, _ = to.Write(w.line)
	w.line = w.line[:0]
}

// wait waits for the attempt being streamed to end (its log ends with
// it), and reports whether attempts were streamed and every one came
// whole.
func (s *logStream) wait() bool {
	if s.done == nil {
		return false
	}
	<-s.done
	return !s.broken.Load()
}

func terminalTask(state string) bool {
	switch state {
	case api.TaskSucceeded, api.TaskFailed, api.TaskTimedOut, api.TaskCancelled:
		return true
	}
	return false
}

// progressLine says where a task stands, from its state and latest
// timeline event: "PENDING: waiting: 0/3 nodes eligible: …".
func progressLine(t api.Task) string {
	line := t.State
	if n := len(t.Timeline); n > 0 {
		ev := t.Timeline[n-1]
		line += ": " + ev.Kind + ": " + ev.Message
	}
	return line
}

func runTaskStatus(e *env, args []string) error {
	c := newClientCommand(e, "task status", "ID", "Show a task: its spec, attempts and timeline.", true)
	fs, cf := c.fs, &c.cf
	stale := fs.Bool("stale", false, "answer from the replica asked, even without a leader (may be behind);\nby default the leader answers after confirming its leadership")
	cl, err := c.start(e, args, 1, "task status takes exactly one task id")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t, _, err := cl.GetTask(ctx, fs.Arg(0), api.ReadOptions{Consistent: !*stale})
	if err != nil {
		return fmt.Errorf("task status: %w", err)
	}
	if cf.structured() {
		return cf.print(e.stdout, t)
	}
	w := e.stdout
	s := t.Spec
	tb := &table{}
	tb.add("ID", t.ID)
	tb.add("Name", t.Name)
	tb.add("State", t.State)
	tb.add("Submitted", ago(t.SubmittedAt)+" by "+s.Submitter)
	tb.add("Command", strings.Join(quoteArgs(s.Command), " "))
	tb.add("Priority", strconv.Itoa(deref(s.Priority)))
	if s.Driver == spec.DriverOCI {
		network := s.Network
		if network == "" {
			network = spec.NetworkHost
		}
		tb.add("Image", s.Image+" (driver oci, network "+network+")")
		tb.add("Needs", "a node with "+s.Capability+"@"+s.CapabilityVersion+" and a working OCI runtime (the oci driver)")
	} else {
		tb.add("Needs", "a node with "+s.Capability+"@"+s.CapabilityVersion)
	}
	tb.add("Resources", fmt.Sprintf("cpu %dm, memory %d MB, gpu %d, disk %d MB", s.Resources.CPUMillis, s.Resources.MemoryMB, s.Resources.GPU, s.Resources.DiskMB))
	tb.add("Timeout", fmt.Sprintf("%ds", deref(s.TimeoutSeconds)))
	tb.add("Attempts", fmt.Sprintf("%d of at most %d", len(t.Attempts), deref(s.MaxAttempts)))
	class := s.Class
	if class == "" {
		class = t.Name + " (its name)"
	}
	tb.add("Class", class)
	if s.Speculative {
		tb.add("Speculative", "yes: once an attempt is slow, a backup starts on another node; the first to succeed wins")
	}
	if s.Size != "" {
		tb.add("Size", s.Size+": tiers "+strings.Join(s.Tiers, ", "))
	}
	if len(s.Inputs) > 0 {
		tb.add("Inputs", strings.Join(s.Inputs, ", "))
	}
	if len(s.Outputs) > 0 {
		tb.add("Outputs", strings.Join(s.Outputs, ", "))
	}
	tb.write(w)
	if len(t.Attempts) > 0 {
		fmt.Fprintln(w, "\nAttempts")
		at := &table{}
		at.add("#", "ID", "NODE", "STATE", "LEASE", "STARTED", "FINISHED", "EXIT", "WHY")
		for _, a := range t.Attempts {
			at.add(strconv.Itoa(a.Number), a.ID, a.NodeID, a.State, strconv.FormatUint(a.LeaseVersion, 10), ago(a.StartedAt), ago(a.FinishedAt), strconv.Itoa(a.ExitCode), a.Error)
		}
		at.write(w)
		last := t.Attempts[len(t.Attempts)-1]
		if last.OutputTail != "" {
			fmt.Fprintf(w, "\nOutput of attempt %d (tail)\n%s", last.Number, last.OutputTail)
			if !strings.HasSuffix(last.OutputTail, "\n") {
				fmt.Fprintln(w)
			}
		}
	}
	if t.State == api.TaskPending {
		if ex, err := cl.ExplainTask(ctx, t.ID, api.ReadOptions{Consistent: !*stale}); err == nil {
			fmt.Fprintf(w, "\nWaiting: %s\n", ex.Summary)
		}
	}
	fmt.Fprintln(w, "\nTimeline")
	tl := &table{}
	tl.add("TIME", "INDEX", "EVENT", "DETAIL")
	for _, ev := range t.Timeline {
		tl.add(ago(ev.Time), strconv.FormatUint(ev.Index, 10), ev.Kind, ev.Message)
	}
	tl.write(w)
	return nil
}

func runTaskList(e *env, args []string) error {
	c := newClientCommand(e, "task list", "", "List tasks in submission order.", true)
	fs, cf := c.fs, &c.cf
	state := fs.String("state", "", "only tasks in this state (PENDING, RUNNING, SUCCEEDED, …)")
	limit := fs.Int("limit", api.DefaultListLimit, "at most this many tasks")
	after := fs.String("after", "", "start after this task id (the 'next' cursor of a previous page)")
	stale := fs.Bool("stale", false, "answer from the replica asked, even without a leader (may be behind);\nby default the leader answers after confirming its leadership")
	fs.BoolVar(&cf.watch, "watch", false, "print the list again whenever it changes, until interrupted")
	cl, err := c.start(e, args, 0, "task list takes no arguments")
	if err != nil {
		return err
	}
	return cf.watchOr(e, cl, "task", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		list, _, err := cl.ListTasks(ctx, api.TaskQuery{State: *state, Limit: *limit, After: *after}, api.ReadOptions{Consistent: !*stale})
		if err != nil {
			return fmt.Errorf("task list: %w", err)
		}
		if cf.structured() {
			return cf.print(e.stdout, list)
		}
		tb := &table{}
		cols := []string{"ID", "NAME", "STATE", "PRIORITY", "SUBMITTER", "SUBMITTED"}
		if cf.wide() {
			cols = append(cols, "CLASS", "NEEDS", "CPU", "MEMORY", "GPU", "DRIVER", "CURRENT ATTEMPT")
		}
		tb.add(cols...)
		for _, t := range list.Tasks {
			row := []string{t.ID, t.Name, t.State, strconv.Itoa(deref(t.Spec.Priority)), t.Spec.Submitter, ago(t.SubmittedAt)}
			if cf.wide() {
				s := t.Spec
				driver := s.Driver
				if driver == "" {
					driver = spec.DriverExec
				}
				row = append(row, orDash(s.Class), s.Capability+"@"+s.CapabilityVersion, fmt.Sprintf("%dm", s.Resources.CPUMillis),
					fmt.Sprintf("%d MB", s.Resources.MemoryMB), strconv.FormatInt(s.Resources.GPU, 10), driver, orDash(t.CurrentAttempt))
			}
			tb.add(row...)
		}
		tb.write(e.stdout)
		if list.Next != "" {
			fmt.Fprintf(e.stdout, "\nMore: herd task list -after %s\n", list.Next)
		}
		return nil
	})
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$") {
			out[i] = strconv.Quote(a)
		} else {
			out[i] = a
		}
	}
	return out
}

func runTaskCancel(e *env, args []string) error {
	c := newClientCommand(e, "task cancel", "ID", "Cancel a task. A running attempt is stopped by its agent; a late result from it is refused.", true)
	fs, cf := c.fs, &c.cf
	reason := fs.String("reason", "", "why, recorded in the task's timeline")
	cl, err := c.start(e, args, 1, "task cancel takes exactly one task id")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t, err := cl.CancelTask(ctx, fs.Arg(0), *reason)
	if err != nil {
		return fmt.Errorf("task cancel: %w", err)
	}
	if cf.structured() {
		return cf.print(e.stdout, t)
	}
	fmt.Fprintf(e.stdout, "Task %s is %s\n", t.ID, t.State)
	return nil
}

// submitFile submits the task specs of a JSON-lines file in batches of
// api.MaxBatchTasks. A spec without an idempotency key gets a random one,
// so a batch retried after an unknown outcome creates nothing twice.
func submitFile(e *env, cf *clientFlags, path string, wait bool) error {
	in := e.stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("open task specs: %w", err)
		}
		defer f.Close()
		in = f
	}
	var specs []api.TaskSpec
	dec := json.NewDecoder(in)
	dec.DisallowUnknownFields()
	for n := 1; ; n++ {
		var spec api.TaskSpec
		err := dec.Decode(&spec)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return usagef("%s: task spec %d: %v", path, n, jsonDecodeError(err, spec))
		}
		if spec.IdempotencyKey == "" {
			spec.IdempotencyKey = randomKey()
		}
		specs = append(specs, spec)
	}
	if len(specs) == 0 {
		return usagef("%s holds no task specs", path)
	}
	cl, err := cf.client()
	if err != nil {
		return err
	}
	var all []api.BatchSubmitResult
	var index uint64
	progress := newStatusLine(e.stderr)
	if cf.structured() {
		progress = &statusLine{w: io.Discard}
	}
	var follow *batchFollower
	for start := 0; start < len(specs); start += api.MaxBatchTasks {
		end := min(start+api.MaxBatchTasks, len(specs))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := cl.SubmitTasks(ctx, specs[start:end])
		cancel()
		if err != nil {
			return fmt.Errorf("submit tasks %d-%d of %d (the earlier ones are committed): %w", start+1, end, len(specs), err)
		}
		all = append(all, res.Tasks...)
		index = res.Index
		if wait && follow == nil {
			follow = followBatch(cl, res.Index)
			defer follow.stop()
		}
		if progress.tty {
			progress.show(fmt.Sprintf("submitted %d/%d [%s]", len(all), len(specs), bar(len(all), len(specs), 30)))
		}
	}
	progress.done()
	if wait {
		return follow.wait(e, cf, all)
	}
	if cf.structured() {
		return cf.print(e.stdout, api.BatchSubmitResponse{Tasks: all, Index: index})
	}
	created := 0
	for _, r := range all {
		if r.Created {
			created++
		}
	}
	fmt.Fprintf(e.stdout, "Submitted %d tasks (%d already existed under their idempotency keys), committed by index %d\n", created, len(all)-created, index)
	return nil
}

// batchFollower keeps the latest state of tasks from the event stream.
type batchFollower struct {
	cl     *api.Client
	cancel context.CancelFunc
	wake   <-chan struct{}
	mu     sync.Mutex
	states map[string]string
}

// followBatch follows the task events from index from (the first batch's
// commit): tasks of later batches may move before their batch answers, so
// every task's state is kept, not only those known yet.
func followBatch(cl *api.Client, from uint64) *batchFollower {
	ctx, cancel := context.WithCancel(context.Background())
	f := &batchFollower{cl: cl, cancel: cancel, states: map[string]string{}}
	f.wake = wakeOnEvents(ctx, cl, from, []api.EventTopicFilter{{Topic: "task"}}, func(l api.EventLine) {
		if l.Lost == nil && l.State != "" {
			f.mu.Lock()
			f.states[l.Key] = l.State
			f.mu.Unlock()
		}
	})
	return f
}

func (f *batchFollower) stop() { f.cancel() }

// count says how many of the tasks are placed (or further) and finished,
// and lists the unfinished ones.
func (f *batchFollower) count(tasks []api.BatchSubmitResult) (placed, finished, failed int, open []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range tasks {
		st := f.states[t.ID]
		if st == "" {
			st = t.State
		}
		switch {
		case terminalTask(st):
			placed++
			finished++
			if st != api.TaskSucceeded {
				failed++
			}
		case st == api.TaskScheduled || st == api.TaskRunning:
			placed++
			open = append(open, t.ID)
		default:
			open = append(open, t.ID)
		}
	}
	return placed, finished, failed, open
}

// wait follows the tasks to their ends with a progress bar (a line per
// change off a terminal) and fails unless all succeed. When the stream
// says nothing for a while, the unfinished tasks are read directly (a
// stream that lost events, or a server without one).
func (f *batchFollower) wait(e *env, cf *clientFlags, tasks []api.BatchSubmitResult) error {
	line := newStatusLine(e.stderr)
	total := len(tasks)
	quiet := time.Now()
	for {
		placed, finished, failed, open := f.count(tasks)
		line.show(fmt.Sprintf("submitted %d, placed %d, finished %d/%d (%d failed) [%s]", total, placed, finished, total, failed, bar(finished, total, 30)))
		if finished == total {
			line.done()
			if cf.structured() {
				f.mu.Lock()
				out := make([]api.BatchSubmitResult, len(tasks))
				for i, t := range tasks {
					out[i] = t
					out[i].State = f.states[t.ID]
				}
				f.mu.Unlock()
				if err := printJSON(e.stdout, out); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(e.stdout, "%d tasks finished: %d succeeded, %d did not\n", total, total-failed, failed)
			}
			if failed > 0 {
				return &exitWith{code: 1, msg: fmt.Sprintf("%d of %d tasks did not succeed", failed, total)}
			}
			return nil
		}
		select {
		case <-f.wake:
			quiet = time.Now()
		case <-time.After(250 * time.Millisecond):
		}
		if time.Since(quiet) > 5*time.Second {
			quiet = time.Now()
			for _, id := range open[:min(len(open), 200)] {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				t, _, err := f.cl.GetTask(ctx, id, api.ReadOptions{Consistent: true})
				cancel()
				if err == nil {
					f.mu.Lock()
					f.states[id] = t.State
					f.mu.Unlock()
				}
			}
		}
	}
}

func runTaskLogs(e *env, args []string) error {
	fs := newFlags(e, "task logs", "ID", "Print an attempt's log from the node that ran it (agents keep logs for\nlog_retention, 7 days). With -f, follow it while the attempt runs. When the\nnode is down or the log is gone, say so and print the last 64 KiB of output\nthe cluster keeps instead.")
	var cf clientFlags
	cf.register(e, fs, false)
	attempt := fs.Int("attempt", 0, "attempt number (default: the latest)")
	follow := fs.Bool("f", false, "follow the log while the attempt runs")
	tail := fs.Int64("tail", 0, "only the last N bytes")
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("task logs takes exactly one task id")
	}
	if *attempt < 0 || *tail < 0 {
		return usagef("-attempt and -tail must not be negative")
	}
	cl, err := cf.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err = cl.TaskLog(ctx, e.stdout, fs.Arg(0), *attempt, *tail, *follow)
	if err == nil {
		return nil
	}
	if !errors.Is(err, api.ErrConflict) && !errors.Is(err, api.ErrNotFound) {
		return fmt.Errorf("task logs: %w", err)
	}
	// The node cannot give it: fall back on the tail the cluster keeps.
	t, _, terr := cl.GetTask(ctx, fs.Arg(0), api.ReadOptions{Consistent: true})
	if terr != nil {
		return fmt.Errorf("task logs: %w", err)
	}
	for _, a := range t.Attempts {
		if (*attempt == 0 && a.Number == len(t.Attempts)) || a.Number == *attempt {
			fmt.Fprintf(e.stderr, "herd: %v\nherd: the last %d bytes of attempt %d's output, as the cluster keeps them:\n", err, len(a.OutputTail), a.Number)
			fmt.Fprint(e.stdout, a.OutputTail)
			return nil
		}
	}
	return fmt.Errorf("task logs: %w", err)
}
