//go:build unix

package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"herd/api"
	"herd/internal/version"
)

// previousRelease builds the newest release tag (vX.Y.Z) whose commit is
// not HEAD, from the repository's own history, stamped with its version
// as the release build stamps it. It returns "" when the history has no
// such tag (or no git).
func previousRelease(t *testing.T) (bin, tag string) {
	t.Helper()
	root := moduleRoot(t)
	git := func(args ...string) (string, error) {
		out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
		return strings.TrimSpace(string(out)), err
	}
	head, err := git("rev-parse", "HEAD")
	if err != nil {
		return "", ""
	}
	tags, err := git("tag", "--list", "v[0-9]*", "--sort=-v:refname")
	if err != nil {
		return "", ""
	}
	for _, tg := range strings.Fields(tags) {
		commit, err := git("rev-list", "-n", "1", tg)
		if err != nil || commit == head || !version.Valid(tg) {
			continue
		}
		tag = tg
		break
	}
	if tag == "" {
		return "", ""
	}
	src := t.TempDir()
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", tag)
	extract := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	extract.Stdin = pipe
	if err := extract.Start(); err != nil {
		t.Fatalf("tar: %v", err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v", tag, err)
	}
	if err := extract.Wait(); err != nil {
		t.Fatalf("tar: %v", err)
	}
	bin = filepath.Join(t.TempDir(), "herd-"+tag)
	build := exec.Command("go", "build", "-o", bin, "-ldflags", "-X herd/internal/version.version="+strings.TrimPrefix(tag, "v"), "./cmd/herd")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", tag, err, out)
	}
	return bin, tag
}

// skewLoad submits `true` through each replica on its own, without
// retries, until stopped, and sorts every answer: acknowledged, refused
// in a way a client retries (503, a replica down), or refused as if the
// client had erred (what a skew must never cause).
type skewLoad struct {
	mu                        sync.Mutex
	acked                     []string
	retryable                 int
	wrong                     []string
	stop                      context.CancelFunc
	wg                        sync.WaitGroup
	submittedSinceLastChecked int
}

func startSkewLoad(t *testing.T, addrs []string) *skewLoad {
	ctx, stop := context.WithCancel(context.Background())
	l := &skewLoad{stop: stop}
	for w, addr := range addrs {
		cl, err := api.NewClient(addr)
		if err != nil {
			t.Fatal(err)
		}
		cl.Retries = 0
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				c, cancel := context.WithTimeout(ctx, 10*time.Second)
				res, _, err := cl.SubmitTask(c, api.TaskSpec{Name: "upgrade", IdempotencyKey: fmt.Sprintf("w%d-%d", w, i), Command: []string{"true"}})
				cancel()
				l.mu.Lock()
				var se *api.StatusError
				switch {
				case err == nil:
					l.acked = append(l.acked, res.ID)
				case ctx.Err() != nil:
				case errors.As(err, &se) && se.Code != 503:
					l.wrong = append(l.wrong, fmt.Sprintf("through %s: %v", addr, err))
				default:
					l.retryable++
				}
				l.submittedSinceLastChecked++
				l.mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()
	}
	return l
}

// progressed waits until the load has had n more submits answered.
func (l *skewLoad) progressed(t *testing.T, n int) {
	t.Helper()
	l.mu.Lock()
	l.submittedSinceLastChecked = 0
	l.mu.Unlock()
	if !Eventually(time.Minute, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.submittedSinceLastChecked >= n
	}) {
		t.Fatal("the load stopped getting answers")
	}
}

// The documented upgrade, with real processes, from the previous release
// (the newest earlier tag, built from the repository's history) to this
// build, while a client submits through every replica: the servers one
// at a time, followers first, leadership moved off the last; then the
// agent, drained, under running work. Every submit is acknowledged or
// refused in a way a client retries (never a 400 a skew caused), every
// acknowledged task succeeds, the servers' logs hold no refused unknown
// field, and three voters with a leader remain, all of this build. A
// build that reads older command forms than the upgraded servers wrote
// refuses, clearly, to start on their data. Without an earlier tag the
// procedure runs from this build to itself.
func TestProcessesRollingUpgradeFromThePreviousRelease(t *testing.T) {
	newBin := buildHerd(t)
	oldBin, tag := previousRelease(t)
	if oldBin == "" {
		oldBin, tag = newBin, "this build"
		t.Log("no earlier release tag in the history: the upgrade runs from this build to itself")
	}
	t.Logf("upgrading from %s to %s", tag, version.Version())
	base := t.TempDir()
	var servers []*serverProc
	var join []string
	for i := 1; i <= 3; i++ {
		p := &serverProc{id: fmt.Sprintf("u%d", i), http: FreeAddr(t), raft: FreeAddr(t), dir: filepath.Join(base, fmt.Sprintf("u%d", i))}
		servers = append(servers, p)
		join = append(join, p.http)
	}
	for _, p := range servers {
		p.start(t, oldBin, join)
	}
	stopAtCleanup(t, servers)
	cl, err := api.NewClient(join...)
	if err != nil {
		t.Fatal(err)
	}
	cl.Retries, cl.RetryWait = 120, 250*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	agentLog := filepath.Join(base, "a1.log")
	var agent *exec.Cmd
	startAgent := func(bin string) {
		t.Helper()
		log, err := os.OpenFile(agentLog, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { log.Close() })
		agent = exec.Command(bin, "agent", "-id", "a1", "-servers", strings.Join(join, ","), "-data-dir", filepath.Join(base, "a1"),
			"-slots", "4", "-heartbeat-interval", "1s", "-log-level", "info")
		agent.Stdout, agent.Stderr = log, log
		if err := agent.Start(); err != nil {
			t.Fatalf("start agent: %v", err)
		}
	}
	startAgent(oldBin)
	t.Cleanup(func() {
		if agent != nil && agent.Process != nil {
			_ = agent.Process.Signal(syscall.SIGKILL)
			_ = agent.Wait()
		}
		if t.Failed() {
			b, _ := os.ReadFile(agentLog)
			t.Logf("--- agent log ---\n%s", tail(b, 3000))
		}
	})
	ready := func() {
		t.Helper()
		if !Eventually(time.Minute, func() bool {
			n, _, err := cl.GetNode(ctx, "a1", api.ReadOptions{})
			return err == nil && n.Liveness == api.LivenessReady
		}) {
			t.Fatal("the agent never became READY")
		}
	}
	ready()
	load := startSkewLoad(t, join)
	defer func() { load.stop(); load.wg.Wait() }()
	load.progressed(t, 10)

	// The servers, followers first; leadership leaves the last one before
	// it stops.
	leader, err := cl.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	order := make([]*serverProc, 0, 3)
	for _, p := range servers {
		if p.id != leader.ID {
			order = append(order, p)
		}
	}
	for _, p := range servers {
		if p.id == leader.ID {
			order = append(order, p)
		}
	}
	for _, p := range order {
		if l, err := cl.Leader(ctx); err == nil && l.ID == p.id {
			if _, err := cl.TransferLeadership(ctx, ""); err != nil {
				t.Fatalf("move leadership off %s: %v", p.id, err)
			}
			if !Eventually(30*time.Second, func() bool { l, err := cl.Leader(ctx); return err == nil && l.ID != "" && l.ID != p.id }) {
				t.Fatalf("leadership did not leave %s", p.id)
			}
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("%s did not stop cleanly: %v", p.id, err)
		}
		p.cmd = nil
		p.log.Close()
		p.start(t, newBin, join)
		upgraded := p
		if !Eventually(time.Minute, func() bool {
			conf, err := cl.RaftConfiguration(ctx)
			if err != nil {
				return false
			}
			for _, s := range conf.Servers {
				if s.ID == upgraded.id {
					return s.Version == version.Version()
				}
			}
			return false
		}) {
			t.Fatalf("%s does not show the new version in the raft configuration", p.id)
		}
		// Caught up: it has applied what the leader had committed.
		leaderStats, err := cl.RaftStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		one, _ := api.NewClient(p.http)
		one.Retries, one.RetryWait = 60, 250*time.Millisecond
		if !Eventually(time.Minute, func() bool {
			st, err := one.RaftStats(ctx)
			return err == nil && atoiOr0(st["applied_index"]) >= atoiOr0(leaderStats["commit_index"])
		}) {
			t.Fatalf("%s did not catch up after its upgrade", p.id)
		}
		load.progressed(t, 10)
	}

	// The agent, under running work: drained, its attempts finished,
	// replaced, and taking work again.
	running, err := cl.SubmitTasks(ctx, []api.TaskSpec{
		{Name: "long", Command: []string{"sleep", "2"}}, {Name: "long", Command: []string{"sleep", "2"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range running.Tasks {
		if !Eventually(time.Minute, func() bool {
			task, _, err := cl.GetTask(ctx, r.ID, api.ReadOptions{})
			return err == nil && (task.State == api.TaskRunning || terminal(task.State))
		}) {
			t.Fatalf("task %s never ran", r.ID)
		}
	}
	if _, err := cl.DrainNode(ctx, "a1", true); err != nil {
		t.Fatal(err)
	}
	for _, r := range running.Tasks {
		waitTaskSucceeded(t, cl, r.ID)
	}
	if !Eventually(time.Minute, func() bool {
		n, _, err := cl.GetNode(ctx, "a1", api.ReadOptions{Consistent: true})
		return err == nil && n.RunningAttempts == 0
	}) {
		t.Fatal("the drained agent's attempts did not finish")
	}
	if err := agent.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := agent.Wait(); err != nil {
		t.Fatalf("the agent did not stop cleanly: %v", err)
	}
	startAgent(newBin)
	if !Eventually(time.Minute, func() bool {
		n, _, err := cl.GetNode(ctx, "a1", api.ReadOptions{})
		return err == nil && n.Version == version.Version() && n.Liveness == api.LivenessReady
	}) {
		t.Fatal("the upgraded agent did not register with its new version")
	}
	if _, err := cl.DrainNode(ctx, "a1", false); err != nil {
		t.Fatal(err)
	}
	load.progressed(t, 10)
	load.stop()
	load.wg.Wait()

	load.mu.Lock()
	acked, wrong, retryable := append([]string(nil), load.acked...), load.wrong, load.retryable
	load.mu.Unlock()
	t.Logf("%d submits acknowledged, %d refused for a retry during the upgrade", len(acked), retryable)
	if len(wrong) > 0 {
		t.Errorf("%d submits refused as the client's mistake: %s", len(wrong), strings.Join(wrong, "; "))
	}
	for _, id := range acked {
		waitTaskSucceeded(t, cl, id)
	}
	conf, err := cl.RaftConfiguration(ctx)
	if err != nil {
		t.Fatal(err)
	}
	voters, leaders := 0, 0
	for _, s := range conf.Servers {
		if s.Voter {
			voters++
		}
		if s.Leader {
			leaders++
		}
		if s.Version != version.Version() {
			t.Errorf("%s runs %q after the upgrade", s.ID, s.Version)
		}
	}
	if voters != 3 || leaders != 1 {
		t.Errorf("%d voters and %d leaders after the upgrade: %+v", voters, leaders, conf.Servers)
	}
	for _, p := range servers {
		b, _ := os.ReadFile(p.dir + ".log")
		if n := bytes.Count(b, []byte("unknown field")); n > 0 {
			t.Errorf("%s's log refuses unknown fields %d times", p.id, n)
		}
	}

	// A downgrade onto the upgraded data: refused, saying why, when the
	// previous release reads older command forms.
	if oldBin == newBin {
		return
	}
	victim := servers[0]
	victim.kill()
	down := exec.Command(oldBin, "server", "-id", victim.id, "-data-dir", victim.dir, "-http-addr", victim.http, "-raft-addr", victim.raft,
		"-bootstrap-expect", "3", "-join", strings.Join(join, ","))
	var out bytes.Buffer
	down.Stdout, down.Stderr = &out, &out
	if err := down.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- down.Wait() }()
	select {
	case err := <-exited:
		if err == nil || !strings.Contains(out.String(), "restore the backup") {
			t.Errorf("the downgraded server exited with %v, saying:\n%s", err, tail(out.Bytes(), 2000))
		}
	case <-time.After(15 * time.Second):
		_ = down.Process.Signal(syscall.SIGKILL)
		<-exited
		t.Logf("%s reads the command forms the upgraded servers write: a downgrade to it is allowed", tag)
	}
}

func waitTaskSucceeded(t *testing.T, cl *api.Client, id string) {
	t.Helper()
	var task api.Task
	if !Eventually(time.Minute, func() bool {
		var err error
		task, _, err = cl.GetTask(context.Background(), id, api.ReadOptions{})
		return err == nil && terminal(task.State)
	}) || task.State != api.TaskSucceeded {
		t.Fatalf("task %s ended %s (%+v)", id, task.State, task.Timeline)
	}
}

func atoiOr0(s string) uint64 {
	var n uint64
	_, _ = fmt.Sscan(s, &n)
	return n
}
