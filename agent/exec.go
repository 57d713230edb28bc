package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"herd/api"
	"herd/spec"
)

// outcome is how one attempt ended on this node.
type outcome struct {
	state    string // SUCCEEDED, FAILED, TIMED_OUT or LOST
	exitCode int
	tail     string
	err      string
	// abandoned: the cluster took the attempt back (cancelled, reclaimed)
	// or the agent is stopping; nobody waits for a result.
	abandoned bool
	// startUnreported: the attempt ended before its start was reported
	// (see earlyStart); the end carries it.
	startUnreported bool
	// inputUnavailable: an input could not be fetched from any live
	// node (state LOST): neither the task's fault nor this node's.
	inputUnavailable bool
	// ranFor is how long the attempt ran here, from its process's start
	// to its end, as this node's clock measures it: the cluster dates the
	// end by it, so a report that took long on its way does not make the
	// node look slow.
	ranFor time.Duration
}

// copyBuffers lends the 32 KiB buffers that copy attempts' output to
// their logs, so that an attempt allocates none of its own.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// devNull is the tasks' standard input, opened once for the process (as
// os.Stdin is): a command whose Stdin is nil has exec open /dev/null anew
// for every attempt.
var devNull = sync.OnceValues(func() (*os.File, error) { return os.Open(os.DevNull) })

// runProcess runs one attempt's command to its end: its own process
// group and working directory, HERD_* variables, limits, output to a
// rotating log and a 64 KiB tail, the run timeout, and no process left
// behind afterwards. ctx ends when the attempt is taken back.
func (a *Agent) runProcess(ctx context.Context, as api.Assignment) outcome {
	att, ts := as.Attempt, as.Spec
	// An attempt that could not keep its output or files fails before it
	// starts, with the reason, rather than half-running.
	if why := a.conditions.diskProblem(); why != "" {
		a.conditions.noteWrite(syscall.ENOSPC)
		return outcome{state: api.AttemptFailed, exitCode: -1, err: why}
	}
	workDir, err := a.workDirs.take(att.ID)
	if err != nil {
		a.conditions.noteWrite(err)
		if isNoSpace(err) {
			return outcome{state: api.AttemptFailed, exitCode: -1, err: fmt.Sprintf("no space left for the working directory: %v", err)}
		}
		return outcome{state: api.AttemptFailed, exitCode: -1, err: fmt.Sprintf("create working directory: %v", err)}
	}
	contained := true // until a process starts: then as the limits tell
	defer func() { a.workDirs.give(workDir, att.ID, contained) }()
	// One file per attempt, straight under logs/ (its first line names
	// the task): a directory per task would cost another metadata
	// operation per attempt. The file is made on the attempt's first
	// output (see attemptLog).
	logFile := newAttemptLog(filepath.Join(a.cfg.DataDir, "logs", att.ID+".log"), a.cfg.LogMaxBytes, a.cfg.LogMaxFiles,
		fmt.Sprintf("--- herd: task %s attempt %d (%s) on %s, limits %s, started %s\n",
			att.TaskID, att.Number, att.ID, a.cfg.ID, a.limiter.Name(), a.clock.Now().UTC().Format(time.RFC3339)))
	defer func() {
		if err := logFile.Err(); err != nil {
			a.conditions.noteWrite(err)
			a.logger.Warn("attempt output not logged to disk (its tail still goes with the result)", "attempt", att.ID, "error", err)
		}
		logFile.Close()
	}()
	tail := &tailBuffer{max: api.MaxOutputTail}

	if len(ts.Command) == 0 {
		logFile.Note("--- herd: empty command\n", true)
		return outcome{state: api.AttemptFailed, exitCode: -1, err: "empty command"}
	}
	inputs, err := a.prepareInputs(ctx, as)
	if inputs != "" {
		defer os.RemoveAll(inputs)
	}
	if err != nil {
		msg := "inputs: " + err.Error()
		logFile.Note("--- herd: "+msg+"\n", true)
		var unavailable *inputUnavailableError
		if errors.As(err, &unavailable) {
			return outcome{state: api.AttemptLost, exitCode: -1, err: "input unavailable: " + err.Error(), inputUnavailable: true}
		}
		return outcome{state: api.AttemptFailed, exitCode: -1, err: msg}
	}
	cmd, limits, failed := a.prepareCommand(ctx, att, ts, workDir, inputs, logFile)
	if failed != nil {
		return *failed
	}
	defer limits.Release()
	out, timedOut, launched := a.runToEnd(ctx, att, ts, cmd, limits, logFile, tail)
	if !launched {
		return out
	}
	contained = limits.Contained()
	a.settle(ctx, att, ts, workDir, &out, timedOut, limits, logFile)
	return out
}

// prepareCommand builds the attempt's process: a container run from its
// image under the runtime's limits (the oci driver), or the command in
// its working directory under this agent's limiter. A failure is the
// attempt's outcome.
func (a *Agent) prepareCommand(ctx context.Context, att api.Attempt, ts api.TaskSpec, workDir, inputs string, logFile *attemptLog) (*exec.Cmd, limitHandle, *outcome) {
	if ts.Driver == spec.DriverOCI {
		// The container runtime applies the limits, from the spec it is
		// given; the runtime's run is the attempt's process.
		c, cmd, note, err := a.prepareContainer(ctx, att, ts, workDir, inputs, a.taskEnv(att, ts))
		if err != nil {
			msg := pullFailure(err)
			logFile.Note("--- herd: "+msg+"\n", true)
			return nil, nil, &outcome{state: api.AttemptFailed, exitCode: -1, err: msg}
		}
		logFile.Note("--- herd: "+note+"\n", false)
		if f, err := devNull(); err == nil {
			cmd.Stdin = f
		}
		return cmd, c, nil
	}
	cmd := a.taskCommand(att, ts, workDir)
	if inputs != "" {
		cmd.Env = append(cmd.Env, "HERD_INPUTS="+inputs)
	}
	limits, err := a.limiter.Prepare(att.ID, ts.Resources, cmd.SysProcAttr)
	if err != nil {
		return nil, nil, &outcome{state: api.AttemptFailed, exitCode: -1, err: fmt.Sprintf("set up %s limits: %v", a.limiter.Name(), err)}
	}
	return cmd, limits, nil
}

// runToEnd launches the process with its output to the log and the tail,
// waits for its end (the timeout, or ctx taking it back), and leaves
// nothing of its process group behind. launched is false when it never
// started (out then says why).
func (a *Agent) runToEnd(ctx context.Context, att api.Attempt, ts api.TaskSpec, cmd *exec.Cmd, limits limitHandle, logFile *attemptLog, tail *tailBuffer) (out outcome, timedOut, launched bool) {
	r, w, err := outputPipe()
	if err != nil {
		return outcome{state: api.AttemptFailed, exitCode: -1, err: fmt.Sprintf("output pipe: %v", err)}, false, false
	}
	cmd.Stdout, cmd.Stderr = w, w
	started := time.Now()
	err = limits.Launch(cmd)
	w.Close()
	if err != nil {
		r.Close()
		msg := fmt.Sprintf("start %q: %v", ts.Command[0], err)
		logFile.Note("--- herd: "+msg+"\n", true)
		return outcome{state: api.AttemptFailed, exitCode: 127, err: msg}, false, false
	}
	pid := cmd.Process.Pid
	if err := limits.Started(pid); err != nil {
		a.logger.Warn("limits not applied", "attempt", att.ID, "method", a.limiter.Name(), "error", err)
		logFile.Note(fmt.Sprintf("--- herd: limits not applied: %v\n", err), true)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := copyBuffers.Get().(*[]byte)
		defer copyBuffers.Put(buf)
		// The reader is wrapped so that the copy uses buf: an *os.File
		// source would copy through a fresh 32 KiB buffer of its own.
		_, _ = io.CopyBuffer(io.MultiWriter(logFile, tail), struct{ io.Reader }{r}, *buf)
	}()
	waited := make(chan error, 1)
	go func() { waited <- waitProcess(cmd) }()

	timeout := time.Duration(derefInt64(ts.TimeoutSeconds, spec.DefaultTimeoutSeconds)) * time.Second
	waitErr, timedOut, abandoned := a.awaitEnd(ctx, pid, limits, timeout, waited)
	if c, ok := limits.(*container); ok {
		c.reaped(cmd.ProcessState) // Wait has returned: safe to read
	}
	// Whatever the main process left behind in its group dies with it.
	killGroup(pid)
	limits.KillAll()
	if a.cfg.OnRun != nil {
		a.cfg.OnRun(RunRecord{Node: a.cfg.ID, Task: att.TaskID, Attempt: att.ID, Started: started, Ended: time.Now()})
	}
	select {
	case <-copied:
	case <-time.After(2 * time.Second):
		// Something outside the group still holds the output open.
		r.Close()
		<-copied
	}
	r.Close()
	out = outcome{tail: tail.String(), abandoned: abandoned}
	out.exitCode, out.err = exitStatus(cmd.ProcessState, waitErr)
	return out, timedOut, true
}

// settle judges how the attempt ended (limits, timeout, a lease lost or
// the lease guard's stop), keeps its outputs when it succeeded, and
// notes the end in its log.
func (a *Agent) settle(ctx context.Context, att api.Attempt, ts api.TaskSpec, workDir string, out *outcome, timedOut bool, limits limitHandle, logFile *attemptLog) {
	timeout := time.Duration(derefInt64(ts.TimeoutSeconds, spec.DefaultTimeoutSeconds)) * time.Second
	a.judge(out, timedOut, timeout, limits, ts)
	if fence := fenced(ctx); out.abandoned && fence != nil {
		// Stopped for want of a lease: reported LOST, with why, once the
		// cluster can be reached.
		out.abandoned, out.state, out.exitCode, out.err = false, api.AttemptLost, -1, fence.msg
	}
	if out.state != api.AttemptSucceeded {
		// Stopped by the lease guard while the agent was stopped or hung:
		// LOST, with the guard's reason, like a stop of the agent's own.
		if why := takeFenceRecord(a.cfg.DataDir, att.ID); why != "" {
			out.abandoned, out.state, out.exitCode, out.err = false, api.AttemptLost, -1, why
			a.conditions.note(fmt.Sprintf("attempt %s of task %s %s", att.ID, att.TaskID, why))
		}
	}
	if err := logFile.Err(); err != nil && isNoSpace(err) {
		out.err = strings.TrimPrefix(out.err+"; output not logged: no space left for the log", "; ")
	}
	if out.state == api.AttemptSucceeded {
		a.profile.keepOutputs(att.TaskID, workDir, ts.Outputs)
	}
	logFile.Note(fmt.Sprintf("--- herd: %s, exit code %d %s\n", out.state, out.exitCode, out.err), out.state != api.AttemptSucceeded)
}

// waitProcess waits for a started process to exit and reaps it, waiting
// on the runtime's poller first (see awaitExit), even when it is the
// only wait: with one processor, a wait blocked in the kernel holds it
// until the runtime's monitor next looks, up to 10 ms.
func waitProcess(cmd *exec.Cmd) error {
	awaitExit(cmd.Process.Pid)
	return cmd.Wait()
}

// taskCommand is the attempt's command, ready to launch: in its working
// directory, with the task's environment and the HERD_* variables, as
// the leader of a process group of its own, reading an empty stdin.
func (a *Agent) taskCommand(att api.Attempt, ts api.TaskSpec, workDir string) *exec.Cmd {
	cmd := a.paths.command(ts.Command[0], ts.Command[1:]...)
	cmd.Dir = workDir
	cmd.Env = append(os.Environ(), a.taskEnv(att, ts)...)
	cmd.SysProcAttr = groupLeader()
	if f, err := devNull(); err == nil {
		cmd.Stdin = f
	}
	return cmd
}

// taskEnv is the task's environment and the HERD_* variables (without
// the agent's own environment, which only a plain process inherits).
func (a *Agent) taskEnv(att api.Attempt, ts api.TaskSpec) []string {
	env := append(envList(ts.Env),
		"HERD_TASK_ID="+att.TaskID,
		"HERD_ATTEMPT_ID="+att.ID,
		"HERD_ATTEMPT_NUMBER="+strconv.Itoa(att.Number),
		"HERD_NODE_ID="+a.cfg.ID,
		"HERD_LEASE="+strconv.FormatUint(att.LeaseVersion, 10),
	)
	if addr := a.LeaseAddr(); addr != "" {
		env = append(env, "HERD_AGENT_ADDR="+addr)
	}
	return append(env, a.profile.inputEnv(ts.Inputs)...)
}

// awaitEnd waits for the attempt's main process to end, stopping its
// group when the run timeout passes (timedOut) or the attempt is taken
// back (abandoned), and returns its wait result.
func (a *Agent) awaitEnd(ctx context.Context, pid int, limits limitHandle, timeout time.Duration, waited <-chan error) (waitErr error, timedOut, abandoned bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case waitErr = <-waited:
	case <-timer.C:
		timedOut = true
		waitErr = a.stopGroup(pid, limits, waited)
	case <-ctx.Done():
		abandoned = true
		grace := a.cfg.KillGrace
		if fence := fenced(ctx); fence != nil {
			grace = fence.grace
		}
		waitErr = a.stopGroupWithin(pid, limits, waited, grace)
	}
	return waitErr, timedOut, abandoned
}

// judge sets the attempt's ending state from how it ended: a timeout, a
// take-back, the memory limit, else its exit code.
func (a *Agent) judge(out *outcome, timedOut bool, timeout time.Duration, limits limitHandle, ts api.TaskSpec) {
	switch {
	case timedOut:
		out.state = api.AttemptTimedOut
		out.err = fmt.Sprintf("run timeout of %s exceeded; process group killed", timeout)
	case out.abandoned:
		out.state = api.AttemptLost
		out.err = "stopped: the attempt was taken back"
	case limits.OOMKilled():
		out.state = api.AttemptFailed
		method := a.limiter.Name()
		if c, ok := limits.(*container); ok {
			method = c.rt.name + " container"
		}
		out.err = fmt.Sprintf("killed: memory limit %d MB reached (%s)", ts.Resources.MemoryMB, method)
	case out.exitCode == 0:
		out.state = api.AttemptSucceeded
	default:
		out.state = api.AttemptFailed
	}
}

// stopGroup asks the process group to stop (SIGTERM), kills it after the
// grace period, and returns the main process's wait result.
func (a *Agent) stopGroup(pid int, limits limitHandle, waited <-chan error) error {
	return a.stopGroupWithin(pid, limits, waited, a.cfg.KillGrace)
}

// stopGroupWithin is stopGroup with the given grace.
func (a *Agent) stopGroupWithin(pid int, limits limitHandle, waited <-chan error, grace time.Duration) error {
	terminateGroup(pid)
	select {
	case err := <-waited:
		return err
	case <-time.After(grace):
	}
	killGroup(pid)
	limits.KillAll()
	return <-waited
}

func exitStatus(ps *os.ProcessState, waitErr error) (int, string) {
	if ps == nil {
		if waitErr != nil {
			return -1, waitErr.Error()
		}
		return -1, "no exit status"
	}
	if sig, ok := signalled(ps); ok {
		return 128 + int(sig), "killed by signal " + sig.String()
	}
	var ee *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &ee) {
		return ps.ExitCode(), waitErr.Error()
	}
	return ps.ExitCode(), ""
}

func envList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

func derefInt64(p *int64, def int64) int64 {
	if p == nil {
		return def
	}
	return *p
}
