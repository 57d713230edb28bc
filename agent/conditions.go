package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"herd/api"
)

// The agent reports what is wrong with its node as conditions, committed
// on the node's record: operators read them in the node's status, and the
// scheduler places nothing new on a node while one stands. Today there is
// one: the data directory (attempts' working directories and logs) has
// less than MinFreeDiskMB or fewer than minFreeInodes left, or a write
// there failed for want of space and no write has succeeded since.
//
// The agent goes on heartbeating whatever its conditions: a full disk is
// no reason to be declared DOWN and lose the attempts it runs.

// minFreeInodes is the inode floor of the data directory: an attempt
// needs a working directory and a log file, and rotation more.
const minFreeInodes = 64

// conditionWatch finds and reports the agent's conditions.
type conditionWatch struct {
	a     *Agent
	space func(dir string) (freeBytes, freeInodes uint64, ok bool)
	poke  chan struct{}

	mu        sync.Mutex
	noSpace   error               // the last write that failed for want of space, until one succeeds
	current   []api.NodeCondition // as last found
	reported  []api.NodeCondition // as the cluster last accepted them
	reportGen uint64              // the session they were accepted for
	notes     []string            // for the node's events, until accepted
}

// note queues a line for the node's events and reports it soon.
func (w *conditionWatch) note(s string) {
	w.mu.Lock()
	if len(w.notes) < 8 {
		w.notes = append(w.notes, truncate(s, 512))
	}
	w.mu.Unlock()
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

func newConditionWatch(a *Agent) *conditionWatch {
	return &conditionWatch{a: a, space: diskSpace, poke: make(chan struct{}, 1)}
}

// Conditions are the conditions the agent found at its last check.
func (a *Agent) Conditions() []api.NodeCondition {
	w := a.conditions
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.current)
}

// noteWrite records the result of a write into the data directory: a
// failure for want of space raises the disk condition at once.
func (w *conditionWatch) noteWrite(err error) {
	if err == nil || !isNoSpace(err) {
		return
	}
	w.mu.Lock()
	w.noSpace = err
	w.mu.Unlock()
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// diskProblem checks the data directory now and returns why it cannot
// hold another attempt, or "" when it can.
func (w *conditionWatch) diskProblem() string {
	dir := w.a.cfg.DataDir
	floor := uint64(w.a.cfg.MinFreeDiskMB) << 20
	freeBytes, freeInodes, ok := w.space(dir)
	switch {
	case ok && freeBytes < floor:
		return fmt.Sprintf("no space left for working directories and logs: %d MiB free in the data directory, below the %d MiB floor", freeBytes>>20, w.a.cfg.MinFreeDiskMB)
	case ok && freeInodes < minFreeInodes:
		return fmt.Sprintf("no space left for working directories and logs: %d inodes free in the data directory, below the %d floor", freeInodes, minFreeInodes)
	}
	w.mu.Lock()
	failed := w.noSpace
	w.mu.Unlock()
	if failed == nil {
		return ""
	}
	// A write failed for want of space although the file system reports
	// enough (a quota, reserved blocks): clear it only once a write works.
	if err := probeWrite(dir); err != nil {
		return fmt.Sprintf("no space left for working directories and logs: %v", failed)
	}
	w.mu.Lock()
	if w.noSpace == failed {
		w.noSpace = nil
	}
	w.mu.Unlock()
	return ""
}

// probeWrite writes and removes a small file in dir.
func probeWrite(dir string) error {
	p := filepath.Join(dir, ".space-probe")
	err := os.WriteFile(p, make([]byte, 4096), 0o600)
	_ = os.Remove(p)
	return err
}

// check finds the conditions now.
func (w *conditionWatch) check() []api.NodeCondition {
	var found []api.NodeCondition
	if why := w.diskProblem(); why != "" {
		found = append(found, api.NodeCondition{Type: api.ConditionDiskFull, Message: why})
	}
	w.mu.Lock()
	prev := w.current
	w.current = found
	w.mu.Unlock()
	if !sameConditions(prev, found) {
		if len(found) == 0 {
			w.a.logger.Info("conditions cleared")
		}
		for _, c := range found {
			w.a.logger.Warn("condition", "type", c.Type, "message", c.Message)
		}
	}
	return found
}

// run checks every heartbeat interval (and at once when a write fails
// for want of space) and reports what changed, or everything after a new
// registration, until the cluster has accepted it.
func (w *conditionWatch) run(ctx context.Context) {
	t := time.NewTicker(w.a.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		found := w.check()
		session := w.a.session.Load()
		w.mu.Lock()
		notes := slices.Clone(w.notes)
		due := session != w.reportGen || !sameConditions(found, w.reported) || len(notes) > 0
		w.mu.Unlock()
		if due && session != 0 {
			_, err := w.a.client.SetNodeConditions(ctx, w.a.cfg.ID, session, found, notes...)
			var se *api.StatusError
			switch {
			case err == nil:
				w.mu.Lock()
				w.reported, w.reportGen = found, session
				w.notes = w.notes[len(notes):]
				w.mu.Unlock()
			case errors.As(err, &se) && (se.Reason == "session_changed" || se.Code == http.StatusNotFound):
				w.a.requestReregister()
			case ctx.Err() == nil:
				w.a.logger.Warn("reporting conditions failed", "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.poke:
		}
	}
}

func sameConditions(a, b []api.NodeCondition) bool {
	return slices.EqualFunc(a, b, func(x, y api.NodeCondition) bool { return x.Type == y.Type && x.Message == y.Message })
}
