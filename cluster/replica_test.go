package cluster

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"herd/api"
	"herd/config"
	"herd/fsm"
)

// newInmemReplica is a replica of one voter over raft's in-memory
// transport and stores: real raft, so the status and membership families
// read a real configuration and leader, without disks or sockets. It
// leads once it returns.
func newInmemReplica(t *testing.T, id string) *replica {
	t.Helper()
	stop := make(chan struct{})
	r := &replica{id: id, applyTimeout: 5 * time.Second, logger: hclog.NewNullLogger(), now: time.Now, fsm: fsm.New(nil), stop: stop}
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(id)
	conf.Logger = hclog.NewNullLogger()
	conf.HeartbeatTimeout, conf.ElectionTimeout, conf.LeaderLeaseTimeout = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
	store := raft.NewInmemStore()
	addr, trans := raft.NewInmemTransport(raft.ServerAddress(id))
	ra, err := raft.NewRaft(conf, r.fsm, store, store, raft.NewInmemSnapshotStore(), trans)
	if err != nil {
		t.Fatal(err)
	}
	r.raft = ra
	if err := ra.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: conf.LocalID, Address: addr}}}).Error(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.proposals = newCoalescer(gatedRaft{r}, r.applyTimeout)
	done := make(chan struct{})
	go func() { defer close(done); r.proposals.run(ctx, &r.entryWaiters) }()
	t.Cleanup(func() {
		cancel()
		<-done
		close(stop)
		_ = ra.Shutdown().Error()
	})
	select {
	case <-ra.LeaderCh():
	case <-time.After(30 * time.Second):
		t.Fatal("the single voter did not become leader")
	}
	if err := ra.Barrier(r.applyTimeout).Error(); err != nil {
		t.Fatal(err)
	}
	r.leaderReady.Store(true)
	return r
}

// The status family over one real raft voter: it names itself leader
// with its own addresses, lists itself in the configuration with the
// forms it reads, serves linearizable reads, counts applied commands and
// finds the applied state sound; a replica that is not a ready leader
// refuses a consistent read.
func TestStatusEndpointsOverOneVoter(t *testing.T) {
	r := newInmemReplica(t, "s1")
	self := config.Server{ID: "s1", HTTPAdvertise: "127.0.0.1:4646", RaftAdvertise: "127.0.0.1:4647"}
	e := statusEndpoints{r: r, self: self, forms: fsm.CommandForms, stats: &SchedulerStats{}, logger: hclog.NewNullLogger()}
	ctx := context.Background()
	if _, _, err := r.apply(ctx, fsm.MsgRegisterNode, fsm.RegisterNodeRequest{Now: r.Now(), Node: fsm.Node{
		ID: "edge-1", Capabilities: map[string][]string{"exec": {"1"}}, Resources: api.Resources{CPUMillis: 1000, MemoryMB: 1024}, Slots: 1}}); err != nil {
		t.Fatal(err)
	}
	if addr, ok := e.LeaderHTTPAddress(); !ok || addr != self.HTTPAdvertise {
		t.Fatalf("leader address %q, %v", addr, ok)
	}
	if got := e.Self(); got.ID != "s1" || got.Leader != "s1" || got.State != "Leader" || !got.Bootstrapped || got.HTTPAddress != self.HTTPAdvertise {
		t.Fatalf("self: %+v", got)
	}
	if l, err := e.Leader(); err != nil || l.ID != "s1" || l.HTTPAddress != self.HTTPAdvertise {
		t.Fatalf("leader: %+v, %v", l, err)
	}
	conf, err := e.RaftConfiguration()
	if err != nil || len(conf.Servers) != 1 || !conf.Servers[0].Leader || !conf.Servers[0].Voter || conf.Servers[0].CommandForms != fsm.CommandForms {
		t.Fatalf("configuration: %+v, %v", conf, err)
	}
	if err := e.ConsistentRead(ctx); err != nil {
		t.Fatalf("consistent read: %v", err)
	}
	if m := e.ReadMeta(); m.Index == 0 || !m.KnownLeader {
		t.Fatalf("read meta: %+v", m)
	}
	if st := e.RaftStats(); st["id"] != "s1" || st["leader_id"] != "s1" || st["fsm_index"] == "0" {
		t.Fatalf("raft stats: %v", st)
	}
	if c := e.CheckState(); !c.OK || c.Nodes != 1 || c.Server != "s1" {
		t.Fatalf("state check: %+v", c)
	}
	r.leaderReady.Store(false)
	if err := e.ConsistentRead(ctx); !errors.Is(err, api.ErrNotLeader) {
		t.Fatalf("a leader not ready served a consistent read: %v", err)
	}
}

// The membership family over one real raft voter refuses what would
// break the cluster, each with its reason: a joiner that reads older
// command forms, a joiner that does not answer at its address, removing
// a server that is not there, handing leadership to itself or to a
// stranger; and it records a member's new address without touching raft.
func TestMembershipEndpointsOverOneVoter(t *testing.T) {
	r := newInmemReplica(t, "s1")
	status := &statusEndpoints{r: r, self: config.Server{ID: "s1"}, forms: fsm.CommandForms, stats: &SchedulerStats{}, logger: hclog.NewNullLogger()}
	e := membershipEndpoints{r: r, status: status, dial: (&net.Dialer{}).DialContext, logger: hclog.NewNullLogger()}
	ctx := context.Background()
	old := api.JoinRequest{ID: "s2", RaftAddress: "s2", HTTPAddress: "127.0.0.1:1", CommandForms: fsm.CommandForms - 1}
	if err := e.Join(ctx, old); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "command forms") {
		t.Fatalf("a joiner reading older forms: %v", err)
	}
	silent := api.JoinRequest{ID: "s2", RaftAddress: "s2", HTTPAddress: "127.0.0.1:1", CommandForms: fsm.CommandForms}
	if err := e.Join(ctx, silent); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("a joiner that does not answer: %v", err)
	}
	if err := e.RemovePeer(ctx, "ghost", false); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("removing a stranger: %v", err)
	}
	if err := e.TransferLeadership(ctx, "s1"); !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("a transfer to the leader itself: %v", err)
	}
	if err := e.TransferLeadership(ctx, "ghost"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("a transfer to a stranger: %v", err)
	}
	moved := api.JoinRequest{ID: "s1", RaftAddress: "s1", HTTPAddress: "10.0.0.1:4646", CommandForms: fsm.CommandForms, UpdateOnly: true}
	if err := e.Join(ctx, moved); err != nil {
		t.Fatalf("a member's new address: %v", err)
	}
	if srv, err := r.State().Server("s1"); err != nil || srv.HTTPAddress != "10.0.0.1:4646" {
		t.Fatalf("the record: %+v, %v", srv, err)
	}
	if conf, _ := status.RaftConfiguration(); len(conf.Servers) != 1 {
		t.Fatalf("the configuration changed: %+v", conf)
	}
}
