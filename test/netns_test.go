//go:build linux

package test

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"herd/api"
	"herd/fsm"
	"herd/internal/netns"
)

var (
	netnsDuration = flag.Duration("netns.duration", 0, "run randomly drawn faults for this long (0: each fault once)")
	netnsSeed     = flag.Uint64("netns.seed", 1, "seed of the fault sequence with -netns.duration")
)

// netnsLab is a set of Linux network namespaces joined by veth pairs to a
// bridge that lives in a namespace of its own, with addresses in
// 10.213.N.0/24, which exist only inside these namespaces. Deleting the
// namespaces removes everything (links, addresses, nftables rules, qdiscs).
type netnsLab struct {
	t      *testing.T
	prefix string
	subnet int
	bridge string // namespace holding the bridge
	dir    string // data directories and logs
	nodes  map[string]*nsNode
	next   int
}

type nsNode struct {
	name, ns, ip, hostVeth string
	cmd                    *exec.Cmd
	log                    *os.File
}

func run(args ...string) error { return netns.Run(args...) }

// newNetnsLab skips the test unless it runs as root with iproute2 and the
// kernel lets it create namespaces.
func newNetnsLab(t *testing.T) *netnsLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network-namespace tests need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("network-namespace tests need iproute2 (ip)")
	}
	l := &netnsLab{t: t, prefix: fmt.Sprintf("herdt%d", os.Getpid()%100000), subnet: 100 + rand.IntN(150), dir: t.TempDir(), nodes: map[string]*nsNode{}, next: 1}
	l.bridge = l.prefix + "-br"
	if err := run("ip", "netns", "add", l.bridge); err != nil {
		t.Skipf("cannot create network namespaces here: %v", err)
	}
	t.Cleanup(l.destroy)
	for _, cmd := range [][]string{
		{"ip", "-n", l.bridge, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", l.bridge, "link", "set", "br0", "up"},
	} {
		if err := run(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// add creates a namespace for name with one address on the bridge.
func (l *netnsLab) add(name string) *nsNode {
	l.t.Helper()
	n := &nsNode{name: name, ns: l.prefix + "-" + name, ip: fmt.Sprintf("10.213.%d.%d", l.subnet, l.next), hostVeth: "v-" + name}
	l.next++
	cmds := [][]string{
		{"ip", "netns", "add", n.ns},
		{"ip", "-n", l.bridge, "link", "add", n.hostVeth, "type", "veth", "peer", "name", "eth0", "netns", n.ns},
		{"ip", "-n", l.bridge, "link", "set", n.hostVeth, "master", "br0", "up"},
		{"ip", "-n", n.ns, "addr", "add", n.ip + "/24", "dev", "eth0"},
		{"ip", "-n", n.ns, "link", "set", "eth0", "up"},
		{"ip", "-n", n.ns, "link", "set", "lo", "up"},
	}
	for _, c := range cmds {
		if err := run(c...); err != nil {
			l.t.Fatal(err)
		}
	}
	l.nodes[name] = n
	return n
}

// start runs bin with args inside n's namespace.
func (l *netnsLab) start(n *nsNode, bin string, args ...string) {
	l.t.Helper()
	n.cmd = exec.Command("ip", append([]string{"netns", "exec", n.ns, bin}, args...)...)
	var err error
	n.log, err = os.OpenFile(filepath.Join(l.dir, n.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		l.t.Fatal(err)
	}
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	if err := n.cmd.Start(); err != nil {
		l.t.Fatalf("start %s: %v", n.name, err)
	}
}

func (n *nsNode) signal(sig syscall.Signal) {
	if n.cmd != nil && n.cmd.Process != nil {
		_ = n.cmd.Process.Signal(sig) // ip netns exec execs the binary: same pid
	}
}

func (n *nsNode) kill() {
	if n.cmd != nil && n.cmd.Process != nil {
		_ = n.cmd.Process.Signal(syscall.SIGCONT)
		_ = n.cmd.Process.Signal(syscall.SIGKILL)
		_ = n.cmd.Wait()
	}
	n.cmd = nil
	if n.log != nil {
		n.log.Close()
		n.log = nil
	}
}

func (l *netnsLab) destroy() {
	if l.t.Failed() {
		for _, n := range l.nodes {
			if b, err := os.ReadFile(filepath.Join(l.dir, n.name+".log")); err == nil {
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				l.t.Logf("--- last lines of %s's log:\n%s", n.name, strings.Join(lines[max(0, len(lines)-25):], "\n"))
			}
		}
	}
	for _, n := range l.nodes {
		n.kill()
		n.killRest()
		_ = run("ip", "netns", "del", n.ns)
	}
	_ = run("ip", "netns", "del", l.bridge)
}

// killRest ends every process still in n's namespace: the tasks of an
// agent killed with SIGKILL outlive it (without cgroups nothing else
// stops them) and would keep writing into the test's directory after the
// test. A process that is not the test's child cannot be waited for, so
// the namespace is read again until it is empty (for a second at most).
func (n *nsNode) killRest() {
	for range 50 {
		out, err := exec.Command("ip", "netns", "pids", n.ns).Output()
		pids := strings.Fields(string(out))
		if err != nil || len(pids) == 0 {
			return
		}
		mine := 0
		for _, p := range pids {
			// The test's own process is listed too while a thread of it
			// dials from inside the namespace.
			if pid, err := strconv.Atoi(p); err == nil && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			} else if err == nil {
				mine++
			}
		}
		if mine == len(pids) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dialer dials from inside n's namespace.
func (n *nsNode) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	return netns.Dialer(n.ns)
}

// firewall drops everything between n and the given addresses, both ways,
// TCP and UDP, with nftables inside n's namespace.
func (l *netnsLab) firewall(n *nsNode, peers []string) error {
	set := "{ " + strings.Join(peers, ", ") + " }"
	rules := fmt.Sprintf(`table inet herdfault {
  chain in { type filter hook input priority 0; policy accept; ip saddr %s drop; }
  chain out { type filter hook output priority 0; policy accept; ip daddr %s drop; }
}`, set, set)
	cmd := exec.Command("ip", "netns", "exec", n.ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %v: %s", err, out)
	}
	return nil
}

// lossy drops a share (in percent) of every packet n sends or receives,
// with nftables' random number generator: message loss where the kernel
// has no sch_netem.
func (l *netnsLab) lossy(n *nsNode, percent int) error {
	rules := fmt.Sprintf(`table inet herdfault {
  chain in { type filter hook input priority 0; policy accept; iifname "eth0" numgen random mod 100 < %d drop; }
  chain out { type filter hook output priority 0; policy accept; oifname "eth0" numgen random mod 100 < %d drop; }
}`, percent, percent)
	cmd := exec.Command("ip", "netns", "exec", n.ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %v: %s", err, out)
	}
	return nil
}

func (l *netnsLab) unfirewall(n *nsNode) {
	_ = run("ip", "netns", "exec", n.ns, "nft", "delete", "table", "inet", "herdfault")
}

// servers starts three `herd server` processes (s1–s3), each in its own
// namespace, forming one cluster, with extra flags added (-insecure when
// none are given: they listen off loopback); start (re)starts one of them
// from its data directory.
func (l *netnsLab) servers(bin string, extra ...string) (servers []*nsNode, httpAddrs []string, start func(*nsNode)) {
	return l.serversWith(bin, nil, append([]string{"-insecure"}, extra...)...)
}

// serversWith is servers with per-server flags (certificates) from each.
func (l *netnsLab) serversWith(bin string, each func(n *nsNode) []string, extra ...string) (servers []*nsNode, httpAddrs []string, start func(*nsNode)) {
	for i := 1; i <= 3; i++ {
		n := l.add(fmt.Sprintf("s%d", i))
		servers = append(servers, n)
		httpAddrs = append(httpAddrs, n.ip+":4646")
	}
	start = func(n *nsNode) {
		args := append([]string{"server"}, extra...)
		if each != nil {
			args = append(args, each(n)...)
		}
		args = append(args, "-id", n.name, "-data-dir", filepath.Join(l.dir, n.name),
			"-http-addr", n.ip+":4646", "-raft-addr", n.ip+":4647", "-gossip-addr", n.ip+":4648",
			"-bootstrap-expect", "3", "-join", strings.Join(httpAddrs, ","), "-log-level", "info")
		l.start(n, bin, args...)
	}
	for _, n := range servers {
		start(n)
	}
	return servers, httpAddrs, start
}

// The chaos workload against real `herd server` and `herd agent` processes,
// each in its own network namespace: SIGKILL of the leader, SIGSTOP of a
// follower past its election timeout, an nftables partition of the leader
// (TCP and UDP), an agent's link taken down, and message loss (netem's
// loss and delay where the kernel has sch_netem, nftables' random drop
// otherwise). With -netns.duration it is a campaign: faults drawn from
// -netns.seed until the time is up, and a table of what was seen. Clients submit, read with ?consistent
// and cancel. Every acknowledged submit must be on every replica, end in
// the same state on each, and the history must be linearizable.
func TestNetnsProcessesUnderFaults(t *testing.T) {
	lab := newNetnsLab(t)
	bin := buildHerd(t)
	_, nftErr := exec.LookPath("nft")

	servers, httpAddrs, startServer := lab.servers(bin)
	var agents []*nsNode
	for i := 1; i <= 2; i++ {
		n := lab.add(fmt.Sprintf("a%d", i))
		agents = append(agents, n)
		lab.start(n, bin, "agent", "-id", n.name, "-servers", strings.Join(httpAddrs, ","), "-data-dir", filepath.Join(lab.dir, n.name),
			"-gossip-addr", n.ip+":4648", "-insecure", "-slots", "4", "-cpu-millis", "4000", "-memory-mb", "2048", "-limits", "none", "-heartbeat-interval", "1s")
	}
	cli := lab.add("cli")
	tr := &http.Transport{DialContext: cli.dialer(), DisableKeepAlives: true}
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	newClient := func(addrs ...string) *api.Client {
		c, err := api.NewClient(addrs...)
		if err != nil {
			t.Fatal(err)
		}
		c.SetHTTPClient(hc)
		return c
	}
	all := newClient(httpAddrs...)
	all.Retries, all.RetryWait = 60, 500*time.Millisecond
	leaderIndex := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		info, err := all.Leader(ctx)
		if err != nil {
			return -1
		}
		for i, a := range httpAddrs {
			if info.HTTPAddress == a {
				return i
			}
		}
		return -1
	}
	if !Eventually(60*time.Second, func() bool { return leaderIndex() >= 0 }) {
		t.Fatal("the namespaced cluster elected no leader")
	}

	// Every attempt ticks into one file (the namespaces share the file
	// system) for about 0.3 s: from the ticks, no two attempts of a task
	// may have run at once.
	ticks := filepath.Join(lab.dir, "ticks")
	ticker := `for i in 1 2 3 4 5 6; do echo "$HERD_TASK_ID $HERD_ATTEMPT_ID $(date +%s%N)" >> ` + ticks + `; sleep 0.05; done`

	// Workload: submits and consistent reads through random replicas.
	var mu sync.Mutex
	var history []porcupine.Operation
	acked := map[string]string{}
	start := time.Now()
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			var keys []string
			for n := 0; ctx.Err() == nil; n++ {
				cl := newClient(httpAddrs[rng.IntN(3)])
				opCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				call := int64(time.Since(start))
				if len(keys) == 0 || rng.IntN(2) == 0 {
					key := fmt.Sprintf("ns-%d-%d", w, n)
					resp, _, err := cl.SubmitTask(opCtx, api.TaskSpec{IdempotencyKey: key, Command: []string{"sh", "-c", ticker}, MaxAttempts: ptr(3)})
					out := taskOutput{}
					switch {
					case err == nil:
						mu.Lock()
						acked[key] = resp.ID
						mu.Unlock()
						keys = append(keys, key)
					case isClientError(err) || notApplied(err):
						cancel()
						time.Sleep(100 * time.Millisecond)
						continue
					default:
						out.Unknown = true
						keys = append(keys, key)
					}
					ret := int64(time.Since(start))
					if out.Unknown {
						ret = math.MaxInt64
					}
					mu.Lock()
					history = append(history, porcupine.Operation{ClientId: w, Input: taskInput{"submit", key}, Output: out, Call: call, Return: ret})
					mu.Unlock()
				} else {
					key := keys[rng.IntN(len(keys))]
					mu.Lock()
					id, ok := acked[key]
					mu.Unlock()
					if ok {
						kind, out, answered := "get", taskOutput{}, false
						if rng.IntN(8) == 0 {
							kind = "cancel"
							task, err := cl.CancelTask(opCtx, id, "netns")
							out, answered = cancelOutput(task, err)
						} else {
							task, _, err := cl.GetTask(opCtx, id, api.ReadOptions{Consistent: true})
							out, answered = readOutput(task, err)
						}
						if answered {
							mu.Lock()
							history = append(history, porcupine.Operation{ClientId: w, Input: taskInput{kind, key}, Output: out, Call: call, Return: int64(time.Since(start))})
							mu.Unlock()
						}
					}
				}
				cancel()
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}

	// An operator drains an agent's node now and then; a zombie replays
	// completions of attempts that already ended, claiming the other
	// outcome: every replay must be refused.
	type zombieReplay struct {
		attempt, before string
		accepted        bool
	}
	var replays []zombieReplay
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			node := agents[i%len(agents)].name
			for _, drain := range []bool{true, false} {
				c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, _ = all.DrainNode(c, node, drain)
				cancel()
				sleepCtx(ctx, 700*time.Millisecond)
			}
		}
	}()
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(7, 7))
		for ctx.Err() == nil {
			sleepCtx(ctx, 300*time.Millisecond)
			mu.Lock()
			var ids []string
			for _, id := range acked {
				ids = append(ids, id)
			}
			mu.Unlock()
			if len(ids) == 0 {
				continue
			}
			c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			task, _, err := all.GetTask(c, ids[rng.IntN(len(ids))], api.ReadOptions{})
			if err == nil {
				for _, a := range task.Attempts {
					if !fsm.AttemptState(a.State).Terminal() {
						continue
					}
					claim := api.AttemptCompleteRequest{LeaseVersion: a.LeaseVersion, State: string(fsm.AttemptSucceeded)}
					if a.State == string(fsm.AttemptSucceeded) {
						claim.State, claim.ExitCode = string(fsm.AttemptFailed), 9
					}
					_, err := all.CompleteAttempt(c, a.ID, claim)
					if err == nil || isConflict(err) { // other failures say nothing
						mu.Lock()
						replays = append(replays, zombieReplay{attempt: a.ID, before: a.State, accepted: err == nil})
						mu.Unlock()
					}
					break
				}
			}
			cancel()
		}
	}()

	faults := []struct {
		name   string
		leader bool // the fault takes the leader away
		do     func() (heal func(), err error)
	}{
		{"SIGKILL leader", true, func() (func(), error) {
			i := leaderIndex()
			if i < 0 {
				return nil, errNoLeaderNow
			}
			servers[i].kill()
			return func() { startServer(servers[i]) }, nil
		}},
		{"SIGSTOP follower", false, func() (func(), error) {
			i := (max(leaderIndex(), 0) + 1) % 3
			servers[i].signal(syscall.SIGSTOP)
			return func() { servers[i].signal(syscall.SIGCONT) }, nil
		}},
		{"nftables partition of the leader", true, func() (func(), error) {
			if nftErr != nil {
				return nil, errSkipFault
			}
			i := leaderIndex()
			if i < 0 {
				return nil, errNoLeaderNow
			}
			var peers []string
			for _, n := range lab.nodes {
				if n != servers[i] {
					peers = append(peers, n.ip)
				}
			}
			if err := lab.firewall(servers[i], peers); err != nil {
				return nil, err
			}
			return func() { lab.unfirewall(servers[i]) }, nil
		}},
		{"agent link down", false, func() (func(), error) {
			a := agents[0]
			if err := run("ip", "-n", lab.bridge, "link", "set", a.hostVeth, "down"); err != nil {
				return nil, err
			}
			return func() { _ = run("ip", "-n", lab.bridge, "link", "set", a.hostVeth, "up") }, nil
		}},
		{"message loss", false, func() (func(), error) {
			i := (max(leaderIndex(), 0) + 2) % 3
			if err := run("ip", "netns", "exec", servers[i].ns, "tc", "qdisc", "add", "dev", "eth0", "root", "netem", "loss", "20%", "delay", "50ms"); err != nil {
				if nftErr != nil {
					t.Logf("netem and nftables unavailable, fault skipped: %v", err)
					return nil, errSkipFault
				}
				// No sch_netem here: the loss without the delay.
				if err := lab.lossy(servers[i], 20); err != nil {
					return nil, err
				}
				return func() { lab.unfirewall(servers[i]) }, nil
			}
			return func() { _ = run("ip", "netns", "exec", servers[i].ns, "tc", "qdisc", "del", "dev", "eth0", "root") }, nil
		}},
	}
	// The faults: each once in order by default; with -netns.duration, drawn
	// from -netns.seed one at a time, held 2–5 s and healed, until the
	// duration has passed.
	counts := map[string]int{}
	var injections []time.Duration // faults that take the leader away
	inject := func(i int, hold time.Duration) {
		f := faults[i]
		heal, err := f.do()
		if errors.Is(err, errSkipFault) {
			return
		}
		if errors.Is(err, errNoLeaderNow) {
			// An election is under way (an earlier fault healed moments
			// ago): this draw is passed over, and counted.
			counts["passed over: no leader to fault"]++
			return
		}
		if err != nil {
			t.Errorf("%s: %v", f.name, err)
			return
		}
		at := time.Since(start)
		counts[f.name]++
		if f.leader {
			injections = append(injections, at)
		}
		t.Logf("%v: %s", at.Round(time.Millisecond), f.name)
		time.Sleep(hold)
		heal()
	}
	if *netnsDuration <= 0 {
		for i := range faults {
			time.Sleep(2 * time.Second)
			inject(i, 4*time.Second)
		}
	} else {
		rng := rand.New(rand.NewPCG(*netnsSeed, 13))
		for time.Since(start) < *netnsDuration {
			time.Sleep(time.Duration(1500+rng.IntN(1500)) * time.Millisecond)
			inject(rng.IntN(len(faults)), time.Duration(2000+rng.IntN(3000))*time.Millisecond)
		}
	}
	time.Sleep(2 * time.Second)
	stop()
	wg.Wait()

	// Quiesce: every acknowledged task ends, on every replica, in the same
	// state. Each replica's own view is read page by page (no forwarding),
	// so what is checked is what that replica applied.
	mu.Lock()
	ackedCopy := make(map[string]string, len(acked))
	for k, v := range acked {
		ackedCopy[k] = v
	}
	ops := slices.Clone(history)
	mu.Unlock()
	if len(ackedCopy) == 0 {
		t.Fatal("no submit was acknowledged")
	}
	anomalies := map[string]int{}
	final := map[string]string{} // task id → terminal state on the first replica
	for i, addr := range httpAddrs {
		cl := newClient(addr)
		cl.Retries, cl.RetryWait = 10, 500*time.Millisecond
		var states map[string]string
		var missing []string
		ended := Eventually(quiesceWithin(len(ackedCopy)), func() bool {
			states = map[string]string{}
			for after := ""; ; {
				c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				page, _, err := cl.ListTasks(c, api.TaskQuery{After: after, Limit: 1000}, api.ReadOptions{})
				cancel()
				if err != nil {
					return false
				}
				for _, task := range page.Tasks {
					states[task.ID] = task.State
				}
				if page.Next == "" {
					break
				}
				after = page.Next
			}
			missing = missing[:0]
			for _, id := range ackedCopy {
				st, ok := fsm.ParseTaskState(states[id])
				if !ok || !st.Terminal() {
					missing = append(missing, id)
				}
			}
			return len(missing) == 0
		})
		if !ended {
			for _, id := range missing {
				if states[id] == "" {
					anomalies["acked-present"]++
					t.Errorf("s%d: acknowledged task %s is missing", i+1, id)
				} else {
					anomalies["terminal"]++
					t.Errorf("s%d: acknowledged task %s not ended: %s", i+1, id, states[id])
				}
			}
		}
		// Each replica checks its own state's invariants once the work
		// has ended.
		c, cancel := context.WithTimeout(context.Background(), time.Minute)
		check, err := cl.CheckState(c)
		cancel()
		if err != nil || !check.OK {
			anomalies["state-check"]++
			t.Errorf("s%d: state check: %v %v", i+1, err, check.Violations)
		}
		for _, id := range ackedCopy {
			last, ok := states[id]
			if !ok {
				continue
			}
			if want, seen := final[id]; !seen {
				final[id] = last
			} else if last != want {
				anomalies["ended-alike"]++
				t.Errorf("task %s ended %s on s1 but %s on s%d", id, want, last, i+1)
			}
		}
	}
	for _, o := range tickOverlaps(t, ticks) {
		anomalies["no-overlap"]++
		t.Errorf("two attempts ran at once: %s", o)
	}
	refused := 0
	for _, r := range replays {
		if r.accepted {
			anomalies["stale-result"]++
			t.Errorf("a zombie's replayed result for attempt %s, which had ended %s, was accepted", r.attempt, r.before)
		} else {
			refused++
		}
	}
	t.Logf("%d zombie replays, %d refused", len(replays), refused)
	if res := porcupine.CheckOperations(TaskModel, ops); !res {
		anomalies["linearizable"]++
		t.Errorf("history of %d operations is not linearizable", len(ops))
	}
	t.Logf("%d operations, %d acknowledged tasks, all present and ended alike on every replica", len(ops), len(ackedCopy))

	var failovers []time.Duration
	for _, at := range injections {
		first := int64(-1)
		for _, op := range ops {
			in, out := op.Input.(taskInput), op.Output.(taskOutput)
			if in.Kind == "submit" && !out.Unknown && op.Call >= int64(at) && (first < 0 || op.Return < first) {
				first = op.Return
			}
		}
		if first >= 0 {
			failovers = append(failovers, time.Duration(first)-at)
		}
	}
	unknown := 0
	for _, op := range ops {
		if op.Output.(taskOutput).Unknown {
			unknown++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-38s %v\n", "duration", time.Since(start).Round(time.Second))
	for _, f := range faults {
		fmt.Fprintf(&b, "%-38s %d\n", "faults "+f.name, counts[f.name])
	}
	fmt.Fprintf(&b, "%-38s %d\n", "draws passed over (no leader yet)", counts["passed over: no leader to fault"])
	fmt.Fprintf(&b, "%-38s %d\n", "operations", len(ops))
	fmt.Fprintf(&b, "%-38s %d\n", "acknowledged tasks", len(ackedCopy))
	fmt.Fprintf(&b, "%-38s %d\n", "unknown outcomes", unknown)
	fmt.Fprintf(&b, "%-38s %d of %d refused\n", "zombie replays", refused, len(replays))
	for _, k := range []string{"acked-present", "terminal", "ended-alike", "stale-result", "linearizable", "no-overlap", "state-check"} {
		fmt.Fprintf(&b, "%-38s %d\n", "anomalies "+k, anomalies[k])
	}
	fmt.Fprintf(&b, "%-38s %d (p50 %v, p99 %v)\n", "failovers measured", len(failovers),
		percentile(failovers, 0.50).Round(time.Millisecond), percentile(failovers, 0.99).Round(time.Millisecond))
	t.Logf("netns campaign, seed %d:\n%s", *netnsSeed, b.String())
}

// tickOverlaps reads the attempts' ticks (task, attempt, Unix
// nanoseconds per line) and returns every pair of attempts of one task
// whose ticks interleave: the processes ran at the same time (to within a
// tick, 50 ms: a killed process may have lived up to one tick past its
// last).
func tickOverlaps(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("attempts' ticks: %v", err)
	}
	type span struct {
		attempt     string
		first, last int64
	}
	spans := map[string]map[string]*span{} // task → attempt → span
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		ns, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			continue
		}
		if spans[f[0]] == nil {
			spans[f[0]] = map[string]*span{}
		}
		sp := spans[f[0]][f[1]]
		if sp == nil {
			sp = &span{attempt: f[1], first: ns, last: ns}
			spans[f[0]][f[1]] = sp
		}
		sp.first, sp.last = min(sp.first, ns), max(sp.last, ns)
	}
	var out []string
	for task, byAttempt := range spans {
		var ss []*span
		for _, sp := range byAttempt {
			ss = append(ss, sp)
		}
		slices.SortFunc(ss, func(a, b *span) int { return cmp.Compare(a.first, b.first) })
		last := 0
		for i := 1; i < len(ss); i++ {
			if ss[i].first < ss[last].last {
				out = append(out, fmt.Sprintf("task %s: attempt %s ticked from %d, before attempt %s's last tick at %d", task, ss[i].attempt, ss[i].first, ss[last].attempt, ss[last].last))
			}
			if ss[i].last > ss[last].last {
				last = i
			}
		}
	}
	return out
}

// quiesceWithin is how long the replicas get to end n acknowledged tasks
// once the faults have healed: the short form's two minutes, plus the time
// two agents with four slots need for a long campaign's backlog.
func quiesceWithin(n int) time.Duration {
	return 2*time.Minute + time.Duration(n)*50*time.Millisecond
}

var (
	errSkipFault   = errors.New("fault not available here")
	errNoLeaderNow = errors.New("no leader at the moment")
)

// Real `herd server` and `herd agent` processes, each in a namespace of
// its own: an agent whose link is taken down while it runs a long task is
// alive all along, yet the task's run there ends before its replacement
// starts on the other agent (the ticks both runs append to a shared file
// never interleave); once the link is back, the task's timeline says the
// agent stopped it. Liveness is quickened by a configuration file (1 s
// heartbeats, DOWN after 3), so the lease is 3 s.
func TestNetnsCutOffAgentStopsBeforeItsTaskRunsElsewhere(t *testing.T) {
	lab := newNetnsLab(t)
	bin := buildHerd(t)
	conf := filepath.Join(lab.dir, "server.hcl")
	if err := os.WriteFile(conf, []byte("liveness {\n  heartbeat_interval = \"1s\"\n  max_heartbeat_interval = \"2s\"\n  suspect_after = 2\n  down_after = 3\n  leader_grace = \"2s\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, httpAddrs, _ := lab.servers(bin, "-config", conf)
	startAgent := func(name, labels string) *nsNode {
		n := lab.add(name)
		lab.start(n, bin, "agent", "-id", name, "-servers", strings.Join(httpAddrs, ","), "-data-dir", filepath.Join(lab.dir, name),
			"-gossip-addr", n.ip+":4648", "-insecure", "-slots", "2", "-limits", "none", "-heartbeat-interval", "1s", "-labels", labels)
		return n
	}
	cutOff := startAgent("a1", "first=yes")
	cli := lab.add("cli")
	hc := &http.Client{Transport: &http.Transport{DialContext: cli.dialer(), DisableKeepAlives: true}, Timeout: 5 * time.Second}
	cl, err := api.NewClient(httpAddrs...)
	if err != nil {
		t.Fatal(err)
	}
	cl.SetHTTPClient(hc)
	cl.Retries, cl.RetryWait = 60, 500*time.Millisecond
	if !Eventually(60*time.Second, func() bool {
		n, _, err := cl.GetNode(Ctx(t, 5*time.Second), "a1", api.ReadOptions{Consistent: true})
		return err == nil && n.Liveness == api.LivenessReady
	}) {
		t.Fatal("a1 never became READY")
	}
	ticks := filepath.Join(lab.dir, "ticks")
	spec := api.TaskSpec{Name: "twice", IdempotencyKey: "twice", PreferredLabels: map[string]string{"first": "yes"},
		Command: []string{"sh", "-c", `while :; do echo "$HERD_TASK_ID $HERD_ATTEMPT_ID $(date +%s%N)" >> ` + ticks + `; sleep 0.05; done`}}
	res, _, err := cl.SubmitTask(Ctx(t, 30*time.Second), spec)
	if err != nil {
		t.Fatal(err)
	}
	first := waitTaskState(t, cl, res.ID, api.TaskRunning).Attempts[0]
	if first.NodeID != "a1" {
		t.Fatalf("the task started on %s", first.NodeID)
	}
	startAgent("a2", "first=no")
	if !Eventually(60*time.Second, func() bool {
		n, _, err := cl.GetNode(Ctx(t, 5*time.Second), "a2", api.ReadOptions{Consistent: true})
		return err == nil && n.Liveness == api.LivenessReady
	}) {
		t.Fatal("a2 never became READY")
	}

	if err := run("ip", "-n", lab.bridge, "link", "set", cutOff.hostVeth, "down"); err != nil {
		t.Fatal(err)
	}
	var task api.Task
	if !Eventually(90*time.Second, func() bool {
		task, _, err = cl.GetTask(Ctx(t, 5*time.Second), res.ID, api.ReadOptions{Consistent: true})
		return err == nil && len(task.Attempts) >= 2 && task.Attempts[1].State == api.AttemptRunning
	}) {
		t.Fatalf("the task never ran again: %+v", task.Attempts)
	}
	second := task.Attempts[1]
	if !Eventually(10*time.Second, func() bool {
		b, _ := os.ReadFile(ticks)
		return strings.Contains(string(b), " "+first.ID+" ") && strings.Contains(string(b), " "+second.ID+" ")
	}) {
		t.Fatal("both runs should have ticked")
	}
	if overlaps := tickOverlaps(t, ticks); len(overlaps) > 0 {
		t.Fatalf("the two runs overlap: %v", overlaps)
	}
	if err := cutOff.cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the cut-off agent is gone (%v); it should have stayed up", err)
	}
	if err := run("ip", "-n", lab.bridge, "link", "set", cutOff.hostVeth, "up"); err != nil {
		t.Fatal(err)
	}
	if !Eventually(60*time.Second, func() bool {
		task, _, err = cl.GetTask(Ctx(t, 5*time.Second), res.ID, api.ReadOptions{Consistent: true})
		return err == nil && timelineSays(task, "as its agent reports: stopped on a1: no contact with the cluster")
	}) {
		t.Fatalf("the timeline does not say a1 stopped the first run: %+v", task.Timeline)
	}
}
