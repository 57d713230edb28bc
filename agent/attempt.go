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
	"herd/spec"
)

// execute runs one attempt: have its start committed (fenced by its
// lease), run it under a watchdog, report the result. agentCtx ends with
// the agent; attemptCtx also ends when the cluster takes the attempt
// back, or cancel ends it. startBy, when set, is how long the attempt may
// run before its start is committed (see api.Assignment.StartWithinMs):
// the process starts at once and the start is reported beside it.
// Otherwise it starts only once the start is committed.
func (a *Agent) execute(agentCtx, attemptCtx context.Context, cancel context.CancelCauseFunc, x api.Assignment, startBy time.Time) {
	att := x.Attempt
	log := a.logger.With("task", att.TaskID, "attempt", att.ID, "number", att.Number)
	if ttl, left, _ := a.lease.state(time.Now()); ttl > 0 && left <= a.fenceGrace(ttl)+a.cfg.HeartbeatInterval/10 {
		// It would be stopped at once: give it back.
		log.Warn("not starting the attempt: no lease from the cluster")
		a.report(agentCtx, x, outcome{state: api.AttemptLost, exitCode: -1, err: "not started: the agent had no lease from the cluster"})
		return
	}
	var early *earlyStart
	ran := time.Now()
	if time.Until(startBy) >= minEarlyStart {
		early = a.startEarly(attemptCtx, cancel, x, ran, startBy, log)
	} else {
		switch a.reportStart(attemptCtx, x, time.Time{}, time.Now().Add(a.startDeadline), log) {
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
	}
	a.started.Add(1)
	log.Info("attempt started", "command", x.Spec.Command)
	began := time.Now()

	timeout := time.Duration(derefInt64(x.Spec.TimeoutSeconds, spec.DefaultTimeoutSeconds)) * time.Second
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
	out.ranFor = time.Since(began)
	a.mu.Lock()
	if ex := a.running[att.ID]; ex != nil {
		ex.ended = true
	}
	a.mu.Unlock()
	if early != nil {
		switch early.ended() {
		case startRefused:
			// The cluster took the attempt back, or no longer knows its
			// lease: there is nothing to report.
			log.Info("attempt stopped: its start was refused")
			return
		case startUnreported:
			out.startUnreported = true
		}
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

// minEarlyStart is the least time before its start must be committed for
// which an attempt is started before that: less would not cover the
// start report's way.
const minEarlyStart = 300 * time.Millisecond

// startCoalesce is how long an attempt started early runs before its
// start is reported: one that ends sooner has its start committed with
// its end, one request and one Raft entry for both.
const startCoalesce = 250 * time.Millisecond

// earlyStart reports the start of an attempt whose process is already
// running, and stops the process when the start is refused or cannot
// be committed in time. An attempt started early runs for a moment
// without a committed start, and that is safe: its agent holds a lease
// (it stops the process when the lease runs out, before the cluster can
// re-place it), and the cluster reclaims a reserved attempt only after
// the schedule-to-start timeout, of which startBy is what is left less
// a margin: an attempt whose start is not committed by then is stopped
// first. A cancel or reclaim committed meanwhile takes it back as it
// would a running one.
type earlyStart struct {
	ran    chan struct{}    // closed when the process has ended
	answer chan startAnswer // the start report's outcome, once
}

// startUnreported is an early start's outcome when the process ended
// before the start was reported: the end carries it.
const startUnreported startAnswer = -1

func (a *Agent) startEarly(ctx context.Context, cancel context.CancelCauseFunc, x api.Assignment, began, startBy time.Time, log hclog.Logger) *earlyStart {
	e := &earlyStart{ran: make(chan struct{}), answer: make(chan startAnswer, 1)}
	// The process must be gone by startBy: reporting stops a kill grace
	// before it.
	within := startBy.Sub(began)
	grace := min(a.cfg.KillGrace, within/4)
	deadline := startBy.Add(-grace)
	go func() {
		wait := time.NewTimer(min(startCoalesce, within/4))
		defer wait.Stop()
		select {
		case <-e.ran:
			e.answer <- startUnreported
			return
		case <-ctx.Done():
			e.answer <- whyStopped(ctx)
			return
		case <-wait.C:
		}
		rctx, stop := context.WithDeadline(ctx, deadline)
		ans := a.reportStart(rctx, x, began, deadline, log)
		stop()
		if ans == startRefused && ctx.Err() == nil && !time.Now().Before(deadline) {
			ans = startUnconfirmed // cut off by the deadline, not refused
		}
		switch ans {
		case startRefused:
			cancel(nil)
		case startUnconfirmed:
			if fenced(ctx) == nil {
				log.Warn("stopping the attempt: its start could not be committed in time", "within", within.Round(time.Millisecond))
				cancel(&fenceError{grace: grace, msg: fmt.Sprintf(
					"stopped on %s: its start could not be committed within %s, before the cluster would reclaim it", a.cfg.ID, within.Round(100*time.Millisecond))})
			}
		}
		e.answer <- ans
	}()
	return e
}

// ended tells an early start that the process has ended and returns how
// its start report went.
func (e *earlyStart) ended() startAnswer {
	close(e.ran)
	return <-e.answer
}

// startAnswer is how a start report ended.
type startAnswer int

const (
	startConfirmed   startAnswer = iota // committed: run the attempt
	startRefused                        // refused, or the attempt was taken back: nothing to do
	startUnconfirmed                    // no answer in time: it may or may not have been committed
)

// reportStart reports the start, retrying through failovers until
// deadline. running is when the attempt started running, if it has
// (started early), else zero.
func (a *Agent) reportStart(ctx context.Context, x api.Assignment, running, deadline time.Time, log hclog.Logger) startAnswer {
	backoff := 100 * time.Millisecond
	for {
		start := &api.AttemptStartRequest{LeaseVersion: x.Attempt.LeaseVersion}
		if !running.IsZero() {
			start.RunningMs = time.Since(running).Milliseconds()
		}
		_, err := a.reports.report(ctx, api.AttemptReportItem{AttemptID: x.Attempt.ID, Start: start})
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
	if out.ranFor > 0 {
		// Rounded up: a run of under a millisecond still says it ran.
		req.RanMs = int64((out.ranFor + time.Millisecond - 1) / time.Millisecond)
	}
	req.StartUnreported = out.startUnreported
	req.InputUnavailable = out.inputUnavailable
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
