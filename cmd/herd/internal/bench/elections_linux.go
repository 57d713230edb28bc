//go:build linux

package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"herd/api"
	"herd/config"
	"herd/internal/netns"
)

// benchElections counts the elections three `herd server` processes hold
// while a share of their packets is lost, with the timings before the
// current defaults and with the defaults, one after the other in the same
// run: shorter timeouts fail over faster (the failover step) and must not
// buy that with leaders deposed by loss alone. The servers run in a
// network namespace of the step's own, and nftables drops a share of
// every packet on its loopback (each packet crosses the output hook once,
// so the share is the loss of every message and of every TCP segment's
// retransmission). It needs root, iproute2 and nftables; without them it
// records why it did not run.
func benchElections(exe, dir string, sz benchSizes, r *Result) error {
	if why := netns.Usable(); why != "" {
		r.ElectionsSkipped = why
		return nil
	}
	if _, err := exec.LookPath("nft"); err != nil {
		r.ElectionsSkipped = "nftables (nft) is not installed"
		return nil
	}
	r.ElectionsLossPct, r.ElectionsWindowSec = electionsLossPct, sz.electionsWindow.Seconds()
	before := config.DefaultRaft()
	before.HeartbeatTimeout, before.ElectionTimeout, before.LeaderLeaseTimeout = 1500*time.Millisecond, 1500*time.Millisecond, 750*time.Millisecond
	for i, set := range []struct {
		name     string
		timings  config.Raft
		out, ack *float64
	}{
		{"before", before, &r.ElectionsBefore, &r.ElectionsBeforeAckedPerSec},
		{"defaults", config.DefaultRaft(), &r.ElectionsNow, &r.ElectionsNowAckedPerSec},
	} {
		n, acked, err := electionsUnderLoss(exe, filepath.Join(dir, set.name), fmt.Sprintf("herdb%d-%d", os.Getpid()%100000, i), set.timings, sz.electionsWindow)
		if err != nil {
			var skip *skipError
			if errors.As(err, &skip) {
				r.ElectionsSkipped = skip.why
				return nil
			}
			return fmt.Errorf("elections with the %s timings: %w", set.name, err)
		}
		*set.out, *set.ack = float64(n), acked
	}
	return nil
}

// electionsLossPct is the share of packets lost in the elections step.
const electionsLossPct = 30

// skipError is a reason the machine cannot run a step.
type skipError struct{ why string }

func (e *skipError) Error() string { return e.why }

// electionsUnderLoss runs three servers with the given timings in the
// namespace ns, loses electionsLossPct of their packets for window while
// a writer submits a task every 50 ms, and returns how many elections
// were held (the growth of the highest Raft term) and the writes
// acknowledged per second meanwhile.
func electionsUnderLoss(exe, dir, ns string, t config.Raft, window time.Duration) (elections int, ackedPerSec float64, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, err
	}
	if err := netns.Add(ns); err != nil {
		return 0, 0, &skipError{why: fmt.Sprintf("cannot create a network namespace here: %v", err)}
	}
	defer func() { _ = netns.Delete(ns) }()
	if err := netns.Nft(ns, "table inet herdbenchprobe { }"); err != nil {
		return 0, 0, &skipError{why: fmt.Sprintf("nftables does not work here: %v", err)}
	}
	cfgFile := filepath.Join(dir, "raft.hcl")
	hcl := fmt.Sprintf("raft {\n  heartbeat_timeout = %q\n  election_timeout = %q\n  leader_lease_timeout = %q\n}\n",
		t.HeartbeatTimeout, t.ElectionTimeout, t.LeaderLeaseTimeout)
	if err := os.WriteFile(cfgFile, []byte(hcl), 0o644); err != nil {
		return 0, 0, err
	}
	var httpAddrs []string
	for i := range 3 {
		httpAddrs = append(httpAddrs, fmt.Sprintf("127.0.0.1:%d", 17101+i))
	}
	var cmds []*exec.Cmd
	defer func() {
		for _, c := range cmds {
			_ = c.Process.Signal(syscall.SIGKILL) // ip netns exec execs the binary: the same pid
			_ = c.Wait()
		}
	}()
	for i := range 3 {
		log, err := os.Create(filepath.Join(dir, fmt.Sprintf("s%d.log", i+1)))
		if err != nil {
			return 0, 0, err
		}
		defer log.Close()
		cmd := netns.Command(ns, exe, "server", "-config", cfgFile, "-id", fmt.Sprintf("s%d", i+1),
			"-data-dir", filepath.Join(dir, fmt.Sprintf("s%d", i+1)), "-http-addr", httpAddrs[i],
			"-raft-addr", fmt.Sprintf("127.0.0.1:%d", 17201+i), "-bootstrap-expect", "3", "-join", strings.Join(httpAddrs, ","), "-log-level", "warn")
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			return 0, 0, fmt.Errorf("start s%d: %w", i+1, err)
		}
		cmds = append(cmds, cmd)
	}
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: netns.Dialer(ns)}}
	cl, err := api.NewClient(httpAddrs...)
	if err != nil {
		return 0, 0, err
	}
	cl.SetHTTPClient(hc)
	cl.Retries, cl.RetryWait = 0, 0
	ctx := context.Background()
	if err := waitReady(ctx, cl, time.Minute); err != nil {
		return 0, 0, err
	}
	before := highestTerm(hc, httpAddrs)
	if err := netns.Nft(ns, fmt.Sprintf(`table inet herdbenchloss {
  chain out { type filter hook output priority 0; policy accept; oifname "lo" numgen random mod 100 < %d drop; }
}`, electionsLossPct)); err != nil {
		return 0, 0, err
	}
	var (
		acked   atomic.Int64
		writers sync.WaitGroup
	)
	wctx, stop := context.WithTimeout(ctx, window)
	defer stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := 0; wctx.Err() == nil; i++ {
		select {
		case <-wctx.Done():
			continue
		case <-tick.C:
		}
		writers.Add(1)
		go func() {
			defer writers.Done()
			sctx, cancel := context.WithTimeout(wctx, 2*time.Second)
			defer cancel()
			if _, _, err := cl.SubmitTask(sctx, api.TaskSpec{Name: "loss", IdempotencyKey: fmt.Sprint("loss-", i), Command: []string{"true"}}); err == nil {
				acked.Add(1)
			}
		}()
	}
	writers.Wait() // each ends with the window
	if err := netns.Run("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "herdbenchloss"); err != nil {
		return 0, 0, err
	}
	if err := waitReady(ctx, cl, time.Minute); err != nil {
		return 0, 0, err
	}
	return highestTerm(hc, httpAddrs) - before, float64(acked.Load()) / window.Seconds(), nil
}
