//go:build unix

package test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"herd/agent"
	"herd/api"
)

// procAgent is a real `herd agent` process in a chaos schedule, with its
// lease guard: the faults an in-process agent cannot suffer (SIGSTOP,
// SIGKILL) are made on it. Its tasks' runs are known from what they
// write themselves: the ticker tasks append their task, attempt and the
// time to one file every 50 ms.
type procAgent struct {
	t          *testing.T
	bin, id    string
	dir, log   string
	gossipAddr string
	args       []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	stopped bool
}

// startProcAgents starts the schedule's two process agents, p1 and p2,
// or none under -short (they need the herd binary built). The ticker
// tasks run on them alone, so that one always has room for what the
// other's faults make the leader re-place.
func (ch *chaos) startProcAgents() []*procAgent {
	if testing.Short() {
		return nil
	}
	bin := buildHerd(ch.t)
	return []*procAgent{ch.startProcAgent(bin, "p1"), ch.startProcAgent(bin, "p2")}
}

func (ch *chaos) startProcAgent(bin, id string) *procAgent {
	t := ch.t
	p := &procAgent{t: ch.t, bin: bin, id: id, dir: t.TempDir(), gossipAddr: FreeAddr(t)}
	p.log = filepath.Join(p.dir, "agent.log")
	var servers []string
	for _, r := range ch.c.Replicas {
		servers = append(servers, r.Cfg.HTTPAddr)
	}
	p.args = []string{"agent", "-id", p.id, "-data-dir", filepath.Join(p.dir, "data"), "-slots", "4", "-no-bench", "-limits", "none",
		"-cpu-millis", "4000", "-memory-mb", "2048", "-labels", "process=yes", "-gossip-addr", p.gossipAddr,
		"-heartbeat-interval", ch.c.Replicas[0].Cfg.Liveness.HeartbeatInterval.String(), "-log-level", "info"}
	if ch.c.Secured() {
		files := ch.c.agentFiles(p.id)
		for i := range servers {
			servers[i] = "https://" + servers[i]
		}
		p.args = append(p.args, "-tls-ca-file", files.CA, "-tls-cert-file", files.Cert, "-tls-key-file", files.Key)
	}
	p.args = append(p.args, "-servers", strings.Join(servers, ","))
	p.start()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("--- process agent %s log ---\n%s", p.id, tail(b, 4000))
		}
	})
	return p
}

func (p *procAgent) start() {
	log, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start the process agent: %v", err)
	}
	p.mu.Lock()
	p.cmd, p.stopped = cmd, false
	p.mu.Unlock()
}

// pause stops the agent process (SIGSTOP) for d, as a hung box looks,
// then resumes it.
func (p *procAgent) pause(d time.Duration) {
	p.mu.Lock()
	cmd := p.cmd
	p.stopped = true
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(d)
	_ = cmd.Process.Signal(syscall.SIGCONT)
	p.mu.Lock()
	p.stopped = false
	p.mu.Unlock()
}

// killAndRestart kills the agent process outright (SIGKILL), waits d and
// starts it again on its data directory.
func (p *procAgent) killAndRestart(d time.Duration) {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	time.Sleep(d)
	p.start()
}

// kill ends the agent for good (the test's end).
func (p *procAgent) kill() {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// tickerCommand is a task that ticks 120 times, 50 ms apart, into file.
func tickerCommand(file string) []string {
	return []string{"sh", "-c", fmt.Sprintf(`i=0; while [ $i -lt 120 ]; do echo "$HERD_TASK_ID $HERD_ATTEMPT_ID $(date +%%s%%N)" >> %s; sleep 0.05; i=$((i+1)); done`, file)}
}

// tickers submits a ticker task every second and a half or so, to run on
// the process agents (so that their faults hit them): about four run at
// once, which either agent has room for alone.
func (ch *chaos) tickers(ctx context.Context) {
	if len(ch.procs) == 0 {
		return
	}
	cls := ch.clientsFor("ticker")
	rng := rand.New(rand.NewPCG(ch.cfg.Seed, 5))
	for n := 0; ctx.Err() == nil; n++ {
		sleepCtx(ctx, time.Duration(1000+rng.IntN(1000))*time.Millisecond)
		key := fmt.Sprintf("ticker-%d-%d", ch.cfg.Seed, n)
		spec := api.TaskSpec{
			IdempotencyKey: key, Command: tickerCommand(ch.tickFile), Submitter: "ticker",
			Resources: api.Resources{CPUMillis: 500, MemoryMB: 64}, RequiredLabels: map[string]string{"process": "yes"},
			MaxAttempts: ptr(4), TimeoutSeconds: ptr(int64(60)),
		}
		for try := 0; try < 3 && ctx.Err() == nil; try++ {
			opCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			resp, _, err := cls[rng.IntN(len(cls))].SubmitTask(opCtx, spec)
			cancel()
			if err == nil {
				ch.mu.Lock()
				ch.acked[key] = resp.ID
				ch.mu.Unlock()
				break
			}
			ch.mu.Lock()
			ch.unknownKey[key] = true // may have been applied
			ch.mu.Unlock()
			if isClientError(err) {
				break
			}
		}
	}
}

// tickRuns reads the ticks file into one run record per attempt: from its
// first tick to its last, on the machine's wall clock.
func (ch *chaos) tickRuns() []agent.RunRecord {
	f, err := os.Open(ch.tickFile)
	if err != nil {
		return nil
	}
	defer f.Close()
	type span struct {
		task       string
		first, end int64
	}
	spans := map[string]*span{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			continue // a line cut short when its writer was killed
		}
		ns, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil {
			continue
		}
		s := spans[fields[1]]
		if s == nil {
			s = &span{task: fields[0], first: ns, end: ns}
			spans[fields[1]] = s
		}
		s.first, s.end = min(s.first, ns), max(s.end, ns)
	}
	out := make([]agent.RunRecord, 0, len(spans))
	for attempt, s := range spans {
		out = append(out, agent.RunRecord{Task: s.task, Attempt: attempt, Node: "(ticks)", Started: time.Unix(0, s.first), Ended: time.Unix(0, s.end)})
	}
	return out
}
