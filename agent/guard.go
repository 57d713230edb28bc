package agent

import (
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// leaseGuard is the agent's end of its lease guard (see guard_protocol.go):
// it starts the guard process, tells it every renewal of the lease and the
// attempts kept running on a disconnect, starts it again if it dies, and
// says goodbye when the agent stops on purpose. A nil *leaseGuard is an
// agent without a guard (one run in a test's process, or off Linux): its
// methods do nothing.
type leaseGuard struct {
	path   string
	cfg    guardConfig
	logger hclog.Logger

	mu    sync.Mutex
	state guardState
	keep  map[string]bool
	// sent is the deadline last handed to the writer: renewals that move
	// it by less than the margin are not sent (the guard then acts at
	// most a margin early, which is when the agent's own loop acts).
	sent  int64
	dirty chan struct{}

	stopCh chan struct{}
	done   chan struct{}
}

// guardRestartWait is how long the agent waits before starting a guard
// that died again.
const guardRestartWait = time.Second

// startGuard starts the agent's lease guard, or returns nil when it has
// none to start.
func (a *Agent) startGuard() *leaseGuard {
	if a.cfg.GuardPath == "" {
		return nil
	}
	if !guardSupported {
		a.logger.Warn("no lease guard on this system: a stopped or killed agent leaves its attempts running")
		return nil
	}
	cfg := guardConfig{
		Node: a.cfg.ID, DataDir: a.cfg.DataDir, WorkRoot: a.workDirs.root, AgentAddr: a.LeaseAddr(),
		AgentGroup: ownProcessGroup(),
		AgentPID:   os.Getpid(),
	}
	if c, ok := a.limiter.(interface{ guardCgroups() []guardCgroup }); ok {
		cfg.Cgroups = c.guardCgroups()
	}
	g := &leaseGuard{
		path: a.cfg.GuardPath, cfg: cfg, logger: a.logger.Named("guard"), keep: map[string]bool{},
		dirty: make(chan struct{}, 1), stopCh: make(chan struct{}), done: make(chan struct{}),
	}
	go g.run()
	return g
}

// leaseRenewed tells the guard that the lease now ends ttl after
// renewedAt (a time with a monotonic reading); grace and margin are the
// agent's stop grace and how late its lease loop may notice.
func (g *leaseGuard) leaseRenewed(renewedAt time.Time, ttl, grace, margin time.Duration) {
	if g == nil {
		return
	}
	deadline := monoNow() + int64(time.Until(renewedAt.Add(ttl)))
	g.mu.Lock()
	defer g.mu.Unlock()
	if deadline-g.sent < int64(margin) && ttl == g.state.ttl && grace == g.state.grace {
		return
	}
	g.sent = deadline
	g.state.deadline, g.state.ttl, g.state.grace, g.state.margin = deadline, ttl, grace, margin
	g.notify()
}

// keepRunning tells the guard to spare attempt id (on) or no longer (off):
// it opted into running on when its node is cut off.
func (g *leaseGuard) keepRunning(id string, on bool) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if on {
		g.keep[id] = true
	} else {
		delete(g.keep, id)
	}
	g.state.keep = slices.Sorted(maps.Keys(g.keep))
	g.notify()
}

func (g *leaseGuard) notify() {
	select {
	case g.dirty <- struct{}{}:
	default:
	}
}

func (g *leaseGuard) current() guardState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state
}

// stop says goodbye to the guard (the agent has stopped its attempts
// itself) and waits for it to exit.
func (g *leaseGuard) stop() {
	if g == nil {
		return
	}
	close(g.stopCh)
	<-g.done
}

// run keeps a guard process running until stop.
func (g *leaseGuard) run() {
	defer close(g.done)
	for {
		stopped := g.session()
		if stopped {
			return
		}
		select {
		case <-g.stopCh:
			return
		case <-time.After(guardRestartWait):
		}
	}
}

// session runs one guard process: true once the agent has said goodbye.
func (g *leaseGuard) session() bool {
	cmd := exec.Command(g.path, "agent-guard")
	cmd.Env = guardEnv(os.Environ(), g.logger.GetLevel())
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// A group of its own: a signal to the agent's group (a terminal's
	// ^Z or ^C, a kill of the group) does not reach it.
	cmd.SysProcAttr = groupLeader()
	// The configuration and the whole state are in the pipe before the
	// guard exists (they are a few hundred bytes, well within a pipe's
	// buffer): an agent killed just after starting a guard never leaves
	// one that does not know what to guard.
	r, w, err := os.Pipe()
	if err == nil {
		var conf string
		if conf, err = g.cfg.line(); err == nil {
			_, err = io.WriteString(w, conf+g.current().line())
		}
	}
	if err == nil {
		cmd.Stdin = r
		err = cmd.Start()
		_ = r.Close()
	}
	if err != nil {
		g.logger.Error("cannot start the lease guard: a stopped or killed agent leaves its attempts running", "path", g.path, "error", err)
		if w != nil {
			_ = w.Close()
		}
		return false
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for err == nil {
		select {
		case <-g.dirty:
			_, err = io.WriteString(w, g.current().line())
		case <-g.stopCh:
			_, _ = io.WriteString(w, g.current().line()+"bye\n")
			_ = w.Close()
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
			return true
		case werr := <-exited:
			err = fmt.Errorf("exited: %v", werr)
		}
	}
	_ = w.Close()
	_ = cmd.Process.Kill()
	g.logger.Error("the lease guard stopped; starting it again", "error", err)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
	}
	return false
}

// guardEnv is the guard's environment: the agent's, on one processor,
// at the agent's log level, without the agent's CPU profile (the guard
// would write over it).
func guardEnv(env []string, level hclog.Level) []string {
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		if strings.HasPrefix(kv, "HERD_CPU_PROFILE=") || strings.HasPrefix(kv, "GOMAXPROCS=") || strings.HasPrefix(kv, "HERD_LOG_LEVEL=") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, "GOMAXPROCS=1", "HERD_LOG_LEVEL="+level.String())
}
