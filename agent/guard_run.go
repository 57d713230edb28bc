//go:build unix

package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// guardProcess is the running guard: what it knows and what it did.
type guardProcess struct {
	cfg    guardConfig
	state  guardState
	logger hclog.Logger
	// termed and killed: the SIGTERM and SIGKILL passes for the current
	// deadline are done (a later deadline clears both).
	termed, killed bool
	recorded       map[string]bool // attempts whose fence record is written
}

// RunGuard is the lease guard's whole life (`herd agent-guard`): it reads
// the agent's messages from in until the agent says goodbye or the pipe
// closes, stopping the agent's attempts when the lease ends unrenewed
// and, on a close without goodbye, at once. It returns nil after a
// goodbye or once it has stopped what the dead agent left.
func RunGuard(in io.Reader, logger hclog.Logger) error {
	if !guardSupported {
		return errors.New("the lease guard needs Linux's /proc")
	}
	lines := make(chan string, 16)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		readErr <- sc.Err()
		close(lines)
	}()
	first, ok := <-lines
	if !ok {
		return errors.New("the agent closed the guard's pipe before its configuration")
	}
	conf, found := strings.CutPrefix(first, "config ")
	g := &guardProcess{logger: logger, recorded: map[string]bool{}}
	if !found {
		return fmt.Errorf("the guard's first message is %.40q, not its configuration", first)
	}
	if err := json.Unmarshal([]byte(conf), &g.cfg); err != nil {
		return fmt.Errorf("the guard's configuration: %w", err)
	}
	if g.cfg.Node == "" || g.cfg.DataDir == "" {
		return errors.New("the guard's configuration names no node or data directory")
	}
	g.logger = logger.With("node", g.cfg.Node)
	g.logger.Debug("lease guard running", "agent_group", g.cfg.AgentGroup)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait, armed := g.nextAction(monoNow())
		if armed {
			timer.Reset(wait)
		} else {
			timer.Stop()
		}
		select {
		case line, ok := <-lines:
			if !ok {
				err := <-readErr
				g.agentGone(err)
				return nil
			}
			if done := g.message(line); done {
				return nil
			}
		case <-timer.C:
			g.act(monoNow())
		}
	}
}

// message takes one line from the agent; true when it said goodbye.
func (g *guardProcess) message(line string) bool {
	fields := strings.Fields(line)
	switch {
	case len(fields) == 1 && fields[0] == "bye":
		g.logger.Debug("the agent stops on purpose; the lease guard exits")
		return true
	case len(fields) > 0 && fields[0] == "state":
		s, err := parseGuardState(fields[1:])
		if err != nil {
			g.logger.Warn("ignoring a message from the agent", "error", err)
			return false
		}
		if s.deadline > g.state.deadline || s.deadline == 0 {
			g.termed, g.killed = false, false
		}
		g.state = s
	default:
		g.logger.Warn("ignoring a message from the agent", "message", fmt.Sprintf("%.60q", line))
	}
	return false
}

// termAt and killAt are when, on the monotonic clock, the guard sends
// the attempts SIGTERM and SIGKILL: no earlier than the agent's own lease
// loop would (it starts the stop a grace plus its margin before the
// deadline), and with the kill done before the lease ends, when the
// leader may re-place them.
func (g *guardProcess) termAt() int64 { return g.state.deadline - int64(g.state.grace) }
func (g *guardProcess) killAt() int64 {
	return max(g.state.deadline-int64(g.state.margin/2), g.termAt())
}

// nextAction is how long until the next pass, if one is due.
func (g *guardProcess) nextAction(now int64) (time.Duration, bool) {
	switch {
	case g.state.deadline == 0 || g.killed:
		return 0, false
	case !g.termed:
		return time.Duration(max(g.termAt()-now, 0)), true
	default:
		return time.Duration(max(g.killAt()-now, 0)), true
	}
}

// act runs the passes that are due at now.
func (g *guardProcess) act(now int64) {
	if g.state.deadline == 0 {
		return
	}
	silent := time.Duration(now - (g.state.deadline - int64(g.state.ttl))).Round(100 * time.Millisecond)
	why := fmt.Sprintf("stopped on %s by the agent's lease guard: the lease ran out while the agent gave no sign of life (no renewal for %s, lease %s)",
		g.cfg.Node, silent, g.state.ttl.Round(100*time.Millisecond))
	if !g.termed && now >= g.termAt() {
		g.termed = true
		if n := g.pass(syscall.SIGTERM, why); n > 0 {
			g.logger.Warn("the lease ran out and the agent did not stop its attempts: stopping them", "processes", n, "lease", g.state.ttl, "silent_for", silent)
		}
	}
	if !g.killed && now >= g.killAt() {
		g.killed = true
		if n := g.pass(syscall.SIGKILL, why); n > 0 {
			g.logger.Warn("killed what was left of the attempts at the end of the lease", "processes", n)
		}
	}
}

// agentGone stops everything the agent left, the pipe having closed
// without a goodbye: SIGTERM, then SIGKILL after the grace to whatever
// is still there.
func (g *guardProcess) agentGone(readErr error) {
	why := fmt.Sprintf("stopped on %s by the agent's lease guard: the agent exited without stopping it", g.cfg.Node)
	n := g.pass(syscall.SIGTERM, why)
	if n == 0 {
		g.logger.Debug("the agent is gone and left no attempt running", "error", readErr)
		return
	}
	g.logger.Warn("the agent is gone: stopping the attempts it left running", "processes", n, "error", readErr)
	grace := g.state.grace
	if grace <= 0 {
		grace = 3 * time.Second
	}
	end := time.Now().Add(grace)
	for time.Now().Before(end) && len(g.targets()) > 0 {
		time.Sleep(50 * time.Millisecond)
	}
	if n := g.pass(syscall.SIGKILL, why); n > 0 {
		g.logger.Warn("killed what the agent's attempts left after the grace", "processes", n)
	}
}

// pass sends sig to every process of the agent's attempts (but the kept
// ones) and their groups, recording why for each attempt first, and
// returns how many processes it signalled.
func (g *guardProcess) pass(sig syscall.Signal, why string) int {
	targets := g.targets()
	own := syscall.Getpgrp()
	for _, t := range targets {
		if t.attempt != "" && !g.recorded[t.attempt] {
			g.recorded[t.attempt] = true
			if err := writeFenceRecord(g.cfg.DataDir, t.attempt, why); err != nil {
				g.logger.Warn("cannot record why an attempt was stopped", "attempt", t.attempt, "error", err)
			}
		}
	}
	for _, t := range targets {
		if t.pgid > 1 && t.pgid != own && t.pgid != g.cfg.AgentGroup {
			_ = syscall.Kill(-t.pgid, sig)
		}
		_ = syscall.Kill(t.pid, sig)
	}
	return len(targets)
}

// targets are the processes of the agent's attempts now, but the kept
// attempts'.
func (g *guardProcess) targets() []guardTarget {
	keep := map[string]bool{}
	for _, id := range g.state.keep {
		keep[id] = true
	}
	var out []guardTarget
	for _, t := range scanGuarded(g.cfg) {
		if t.pid == os.Getpid() || keep[t.attempt] {
			continue
		}
		out = append(out, t)
	}
	return out
}
