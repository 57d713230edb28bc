package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"herd/api"
)

type serverProc struct {
	id, http, raft, dir string
	extra               []string // more flags
	cmd                 *exec.Cmd
	log                 *os.File
}

func (p *serverProc) start(t *testing.T, bin string, join []string) {
	t.Helper()
	args := []string{"server", "-id", p.id, "-data-dir", p.dir, "-http-addr", p.http, "-raft-addr", p.raft,
		"-bootstrap-expect", "3", "-join", fmt.Sprint(join[0] + "," + join[1] + "," + join[2]), "-log-level", "info"}
	args = append(args, p.extra...)
	p.cmd = exec.Command(bin, args...)
	var err error
	p.log, err = os.OpenFile(filepath.Join(p.dir+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.id, err)
	}
}

// stopAtCleanup kills the processes when the test ends, and shows the end
// of their logs if it failed.
func stopAtCleanup(t *testing.T, procs []*serverProc) {
	t.Cleanup(func() {
		for _, p := range procs {
			p.kill()
		}
		if t.Failed() {
			for _, p := range procs {
				b, _ := os.ReadFile(p.dir + ".log")
				t.Logf("--- %s log ---\n%s", p.id, tail(b, 3000))
			}
		}
	})
}

func (p *serverProc) kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
		p.cmd = nil
	}
	if p.log != nil {
		p.log.Close()
	}
}

// Real processes: three `herd server` started with -bootstrap-expect form a
// cluster; SIGKILL of the leader loses no acknowledged task; the killed
// server restarts from its data directory and catches up; SIGTERM stops a
// server cleanly.
func TestProcessesSurviveSIGKILLOfLeader(t *testing.T) {
	bin := buildHerd(t)
	base := t.TempDir()
	procs := make([]*serverProc, 3)
	var join []string
	for i := range procs {
		procs[i] = &serverProc{id: fmt.Sprintf("p%d", i+1), http: FreeAddr(t), raft: FreeAddr(t), dir: filepath.Join(base, fmt.Sprintf("p%d", i+1))}
		join = append(join, procs[i].http)
	}
	// Start in reverse order: the order must not matter.
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].start(t, bin, join)
	}
	stopAtCleanup(t, procs)
	cl, err := api.NewClient(join...)
	if err != nil {
		t.Fatal(err)
	}
	cl.Retries, cl.RetryWait = 60, 250*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var acked []api.SubmitResponse
	submit := func(prefix string, n int) {
		for i := 0; i < n; i++ {
			res, _, err := cl.SubmitTask(ctx, echoSpec(fmt.Sprintf("%s-%d", prefix, i)))
			if err != nil {
				t.Fatalf("submit %s-%d: %v", prefix, i, err)
			}
			acked = append(acked, res)
		}
	}
	submit("before", 10)
	leader, err := cl.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var victim *serverProc
	for _, p := range procs {
		if p.id == leader.ID {
			victim = p
		}
	}
	if victim == nil {
		t.Fatalf("leader %q is not one of ours", leader.ID)
	}
	victim.kill()
	submit("after", 10)
	victim.start(t, bin, join)

	one, err := api.NewClient(victim.http)
	if err != nil {
		t.Fatal(err)
	}
	one.Retries, one.RetryWait = 60, 250*time.Millisecond
	for _, a := range acked {
		if !Eventually(30*time.Second, func() bool {
			_, _, err := one.GetTask(ctx, a.ID, api.ReadOptions{})
			return err == nil
		}) {
			t.Fatalf("restarted %s lacks acknowledged task %s", victim.id, a.ID)
		}
	}
	// SIGTERM: a clean exit with status 0.
	p := procs[0]
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("%s did not exit cleanly on SIGTERM: %v", p.id, err)
	}
	p.cmd = nil
}
