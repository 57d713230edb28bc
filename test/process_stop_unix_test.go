//go:build unix

package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"herd/api"
	"herd/config"
)

// Real processes at the default liveness timings (5 s heartbeats, DOWN
// after 5 missed, memberlist's LAN defaults; only the new leader's grace
// is shortened, so the test need not wait it out): an agent stopped with
// SIGSTOP, as a hung box looks, is DOWN within down_after intervals plus
// the jitter downBound allows, about 30 s.
func TestProcessesStoppedAgentIsDownOnTime(t *testing.T) {
	bin := buildHerd(t)
	base := t.TempDir()
	conf := filepath.Join(base, "server.hcl")
	if err := os.WriteFile(conf, []byte("liveness {\n  leader_grace = \"2s\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var procs []*exec.Cmd
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGCONT)
			_ = p.Process.Kill()
			_ = p.Wait()
		}
		if t.Failed() {
			for _, name := range []string{"s1", "s2", "s3", "edge-1"} {
				b, _ := os.ReadFile(filepath.Join(base, name+".log"))
				t.Logf("--- %s log ---\n%s", name, tail(b, 3000))
			}
		}
	})
	start := func(name string, args ...string) *exec.Cmd {
		t.Helper()
		log, err := os.Create(filepath.Join(base, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { log.Close() })
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		procs = append(procs, cmd)
		return cmd
	}
	var join []string
	type addrs struct{ http, raft, gossip string }
	servers := make([]addrs, 3)
	for i := range servers {
		servers[i] = addrs{FreeAddr(t), FreeAddr(t), FreeAddr(t)}
		join = append(join, servers[i].http)
	}
	for i, a := range servers {
		id := fmt.Sprintf("s%d", i+1)
		start(id, "server", "-config", conf, "-id", id, "-data-dir", filepath.Join(base, id), "-http-addr", a.http, "-raft-addr", a.raft,
			"-gossip-addr", a.gossip, "-bootstrap-expect", "3", "-join", join[0]+","+join[1]+","+join[2], "-log-level", "info")
	}
	agentProc := start("edge-1", "agent", "-id", "edge-1", "-servers", join[0]+","+join[1]+","+join[2],
		"-data-dir", filepath.Join(base, "edge-1"), "-slots", "1", "-log-level", "info")
	cl, err := api.NewClient(join...)
	if err != nil {
		t.Fatal(err)
	}
	cl.Retries, cl.RetryWait = 60, 250*time.Millisecond
	if !Eventually(90*time.Second, func() bool { return gossiping(cl, "edge-1") && node(t, cl, "edge-1").Liveness == api.LivenessReady }) {
		t.Fatal("the agent never registered and gossiped")
	}
	// Past any new leader's grace.
	time.Sleep(3 * time.Second)
	stopped := time.Now()
	if err := agentProc.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	lv := config.DefaultLiveness()
	bound := downBound(lv, 3*time.Second)
	var n api.Node
	if !Eventually(3*bound, func() bool { n = node(t, cl, "edge-1"); return n.Liveness == api.LivenessDown }) {
		t.Fatalf("the stopped agent was never declared DOWN: %+v", n)
	}
	took := time.Since(stopped)
	t.Logf("DOWN %v after SIGSTOP (bound %v)", took.Round(time.Millisecond), bound)
	if took > bound {
		t.Errorf("DOWN took %v, more than down_after intervals plus jitter (%v)", took, bound)
	}
}
