package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"herd/api"
	"herd/cluster"
	"herd/config"
)

// One server bootstraps alone; two more join it through its HTTP address.
func TestBootstrapOneThenJoin(t *testing.T) {
	c := NewCluster(t, 1)
	first := c.Replicas[0].Cfg.HTTPAddr
	base := t.TempDir()
	for i := 2; i <= 3; i++ {
		cfg := config.DefaultServer()
		cfg.ID = fmt.Sprintf("s%d", i)
		cfg.DataDir = filepath.Join(base, cfg.ID)
		cfg.HTTPAddr, cfg.RaftAddr = FreeAddr(t), FreeAddr(t)
		cfg.Join = []string{first}
		FastRaft(&cfg)
		c.Replicas = append(c.Replicas, &Replica{Cfg: cfg})
		c.Start(len(c.Replicas) - 1)
	}
	ctx := Ctx(t, 30*time.Second)
	if !Eventually(30*time.Second, func() bool {
		conf, err := c.Client(2).RaftConfiguration(ctx)
		if err != nil || len(conf.Servers) != 3 {
			return false
		}
		for _, s := range conf.Servers {
			if s.HTTPAddress == "" {
				return false
			}
		}
		return true
	}) {
		t.Fatal("joined servers did not appear in the configuration with their addresses")
	}
	acked := submitN(t, c.Client(2), "joined", 5)
	requireTasks(t, c, acked)
	// A joined server restarts from its data dir without joining again.
	c.Stop(2)
	c.Replicas[2].Cfg.Join = nil
	c.Start(2)
	c.WaitForLeader()
	requireTasks(t, c, submitN(t, c.Client(2), "after-restart", 3))
}

// Leader loops start only after the Barrier on the leader, and stop when
// leadership moves.
func TestLeaderLoopsFollowLeadership(t *testing.T) {
	var running [3]atomic.Int32
	var started [3]atomic.Int32
	c := NewClusterWith(t, 3, Setup{Options: func(replica string, o *cluster.Options) {
		i := int(replica[1] - '1')
		o.LeaderLoops = []cluster.LeaderLoop{func(ctx context.Context, s *cluster.Server) {
			if !s.IsLeader() {
				t.Errorf("leader loop started on %s before leadership was established", s.ID())
			}
			started[i].Add(1)
			running[i].Add(1)
			defer running[i].Add(-1)
			<-ctx.Done()
		}}
	}})
	leader := c.WaitForLeader()
	onlyOn := func(want int) bool {
		for i := range running {
			if (running[i].Load() == 1) != (i == want) || running[i].Load() > 1 {
				return false
			}
		}
		return true
	}
	if !Eventually(10*time.Second, func() bool { return onlyOn(leader) }) {
		t.Fatalf("leader loop should run on %d only: %d %d %d", leader, running[0].Load(), running[1].Load(), running[2].Load())
	}
	if _, err := c.Client(leader).TransferLeadership(Ctx(t, 30*time.Second), ""); err != nil {
		t.Fatal(err)
	}
	next := c.WaitForLeader()
	if !Eventually(10*time.Second, func() bool { return onlyOn(next) }) {
		t.Fatalf("after transfer the loop should run on %d only: %d %d %d", next, running[0].Load(), running[1].Load(), running[2].Load())
	}
	if started[leader].Load() != 1 || started[next].Load() != 1 {
		t.Fatalf("each leadership term starts the loop once: %d %d", started[leader].Load(), started[next].Load())
	}
}

// Without a leader a write gets 503 with Retry-After and a JSON error
// whose code says nothing was proposed (safe to retry). While the other
// replicas stop, the survivor may briefly win an election and lose it
// mid-commit; that write honestly answers outcome_unknown, so the test
// waits for the settled answer of a replica that knows no leader.
func TestNoLeaderAnswers503WithRetryAfter(t *testing.T) {
	c := NewCluster(t, 3)
	f := c.Follower()
	for i := range c.Replicas {
		if i != f {
			c.Stop(i)
		}
	}
	var resp *http.Response
	var body api.ErrorResponse
	if !Eventually(20*time.Second, func() bool {
		r, err := http.Post("http://"+c.Replicas[f].Cfg.HTTPAddr+"/v1/tasks", "application/json", strings.NewReader(`{"command":["true"]}`))
		if err != nil {
			return false
		}
		body = api.ErrorResponse{}
		_ = json.NewDecoder(r.Body).Decode(&body)
		r.Body.Close()
		resp = r
		return r.StatusCode == http.StatusServiceUnavailable && body.Code == api.CodeNotApplied
	}) {
		if resp == nil {
			t.Fatal("want 503, the replica never answered")
		}
		t.Fatalf("want 503 %q, last answer %v %+v", api.CodeNotApplied, resp.Status, body)
	}
	if resp.Header.Get("Retry-After") == "" || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("503 must carry Retry-After and a JSON body: %v", resp.Header)
	}
	if body.Code != api.CodeNotApplied || body.Error == "" {
		t.Fatalf("503 without a leader: want code %q and a message, got %+v", api.CodeNotApplied, body)
	}
}
