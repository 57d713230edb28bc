package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"herd/api"

	"github.com/hashicorp/go-hclog"
)

// execute runs one attempt: report the start (fenced), run it under a
// watchdog, report the result. agentCtx ends with the agent; attemptCtx
// also ends when the cluster takes the attempt back.
func (a *Agent) execute(agentCtx, attemptCtx context.Context, x api.Assignment) {
	att := x.Attempt
	log := a.logger.With("task", att.TaskID, "attempt", att.ID, "number", att.Number)
	if ttl, left, _ := a.lease.state(time.Now()); ttl > 0 && left <= a.fenceGrace(ttl)+a.cfg.HeartbeatInterval/10 {
		// It would be stopped at once: give it back.
		log.Warn("not starting the attempt: no lease from the cluster")
		a.report(agentCtx, x, outcome{state: api.AttemptLost, exitCode: -1, err: "not started: the agent had no lease from the cluster"})
		return
	}
	switch a.reportStart(attemptCtx, x, log) {
	case startRefused:
		return
	case startUnconfirmed:
		// The start may have been committed: the cluster would then wait
		// on an attempt nothing runs. Say it did not run.
		why := fmt.Sprintf("the start could not be confirmed with the cluster within %s; not run", a.startDeadline)
		if fence := fenced(attemptCtx); fence != nil {
			why = fence.msg + "; not run"
		}
		a.report(agentCtx, x, outcome{state: api.AttemptLost, exitCode: -1, err: why})
		return
	}
	a.started.Add(1)
	log.Info("attempt started", "command", x.Spec.Command)

	timeout := time.Duration(derefInt64(x.Spec.TimeoutSeconds, api.DefaultTimeoutSeconds)) * time.Second
	done := make(chan outcome, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				log.Error("executor crashed", "panic", p)
				done <- outcome{state: api.AttemptFailed, exitCode: -1, err: fmt.Sprintf("executor crashed: %v", p)}
			}
		}()
		done <- a.runProcess(attemptCtx, x)
	}()
	var out outcome
	watchdog := time.NewTimer(timeout + a.cfg.KillGrace + a.cfg.WatchdogGrace)
	defer watchdog.Stop()
	select {
	case out = <-done:
	case <-watchdog.C:
		// The executor should have ended the process by now: it is hung.
		// Report the attempt failed and move on; the agent stays up.
		log.Error("executor hung past the run timeout; giving the attempt up")
		out = outcome{state: api.AttemptFailed, exitCode: -1, err: "executor hung past the run timeout"}
	}
	if out.abandoned {
		if agentCtx.Err() == nil {
			log.Info("attempt stopped after the cluster took it back")
			return
		}
		out.err = "the agent stopped"
	}
	a.report(agentCtx, x, out)
}

// startAnswer is how a start report ended.
type startAnswer int

const (
	startConfirmed   startAnswer = iota // committed: run the attempt
	startRefused                        // refused, or the attempt was taken back: nothing to do
	startUnconfirmed                    // no answer in time: it may or may not have been committed
)

// reportStart reports the start, retrying through failovers for up to
// startDeadline.
func (a *Agent) reportStart(ctx context.Context, x api.Assignment, log hclog.Logger) startAnswer {
	deadline := time.Now().Add(a.startDeadline)
	backoff := 100 * time.Millisecond
	for {
		_, err := a.reports.report(ctx, api.AttemptReportItem{AttemptID: x.Attempt.ID, Start: &api.AttemptStartRequest{LeaseVersion: x.Attempt.LeaseVersion}})
		if err == nil {
			return startConfirmed
		}
		if refused(err) {
			log.Warn("start refused; not running the attempt", "error", err)
			return startRefused
		}
		if ctx.Err() != nil {
			return whyStopped(ctx)
		}
		if time.Now().After(deadline) {
			log.Warn("could not report the start; not running the attempt, reporting it lost", "error", err)
			return startUnconfirmed
		}
		select {
		case <-ctx.Done():
			return whyStopped(ctx)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// whyStopped is how a start report that ctx cut short ended: the
// attempt was taken back (nothing to report), or the lease on it ran out
// while the report was in flight, and the start may have been committed.
func whyStopped(ctx context.Context) startAnswer {
	if fenced(ctx) != nil {
		return startUnconfirmed
	}
	return startRefused
}

// report sends an attempt's result until a server acknowledges or
// refuses it, or the agent stops.
// refused reports an answer that settles a report: a 4xx. A 5xx (no
// leader, outcome unknown, a timeout) and a failed request are retried:
// reports are idempotent, a repeat of an applied one is answered as a
// duplicate.
func refused(err error) bool {
	var se *api.StatusError
	return errors.As(err, &se) && se.Code >= 400 && se.Code < 500
}

func (a *Agent) report(ctx context.Context, x api.Assignment, out outcome) {
	log := a.logger.With("task", x.Attempt.TaskID, "attempt", x.Attempt.ID)
	req := api.AttemptCompleteRequest{
		LeaseVersion: x.Attempt.LeaseVersion, ExitCode: out.exitCode, OutputTail: truncate(out.tail, api.MaxOutputTail),
		Error: truncate(out.err, api.MaxErrorText), State: out.state,
	}
	backoff := 100 * time.Millisecond
	for {
		rep, err := a.reports.report(ctx, api.AttemptReportItem{AttemptID: x.Attempt.ID, Complete: &req})
		if err == nil {
			a.completed.Add(1)
			log.Info("result accepted", "state", out.state, "exit_code", out.exitCode, "duplicate", rep.Duplicate)
			return
		}
		if refused(err) {
			if errors.Is(err, api.ErrConflict) {
				a.rejected.Add(1)
			}
			log.Warn("result refused by the cluster", "state", out.state, "error", err)
			return
		}
		if ctx.Err() != nil {
			log.Warn("agent stopping; result not delivered", "state", out.state)
			return
		}
		log.Warn("result not delivered yet, retrying", "in", backoff, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// truncate makes s valid UTF-8 of at most n bytes, keeping its end (the
// last output matters most) and cutting on a character boundary.
func truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	for len(s) > n {
		_, size := utf8.DecodeRuneInString(s)
		s = s[size:]
	}
	return s
}
