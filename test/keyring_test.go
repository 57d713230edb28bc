package test

import (
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"herd/agent"
	"herd/api"
	"herd/config"
	"herd/internal/gossip"
)

// The gossip key rotated as Consul rotates it, install → use → remove,
// with agents in the pool: each step reaches every agent, no node goes
// SUSPECT or DOWN on the way, the old key opens no door afterwards, and
// an agent restarted with only the old key in its configuration rejoins
// with the keyring it saved.
func TestGossipKeyRotationWithoutDowntime(t *testing.T) {
	oldKey, newKey := bytesOf(1, 32), bytesOf(2, 32)
	enc := base64.StdEncoding.EncodeToString
	c := NewClusterWith(t, 3, gossipSetup(func(cfg *config.Server) { cfg.GossipKey = enc(oldKey) }))
	dirs := map[string]string{"k1": t.TempDir(), "k2": t.TempDir()}
	agents := map[string]*AgentHandle{}
	for id, dir := range dirs {
		agents[id] = c.StartAgent(agent.Config{ID: id, GossipKey: oldKey, DataDir: dir, Slots: 1})
	}
	cl := c.AllClient()
	ctx := Ctx(t, 2*time.Minute)
	for id := range agents {
		if !Eventually(20*time.Second, func() bool { return gossiping(cl, id) }) {
			t.Fatalf("%s never gossiped", id)
		}
	}
	step := func(op string, key []byte) api.GossipKeyring {
		t.Helper()
		kr, err := cl.ChangeGossipKeyring(ctx, op, enc(key))
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		if !Eventually(30*time.Second, func() bool {
			now, err := cl.GossipKeyring(ctx)
			return err == nil && now.Index == kr.Index && now.NodesCurrent == 2 && len(now.NodesBehind) == 0
		}) {
			now, _ := cl.GossipKeyring(ctx)
			t.Fatalf("after %s the agents did not all take the keyring: %+v", op, now)
		}
		return kr
	}
	if kr := step("install", newKey); len(kr.Keys) != 2 || kr.Primary != enc(oldKey) {
		t.Fatalf("install: %+v", kr)
	}
	if kr := step("use", newKey); kr.Primary != enc(newKey) {
		t.Fatalf("use: %+v", kr)
	}
	if _, err := cl.ChangeGossipKeyring(ctx, "remove", enc(newKey)); statusOf(err) != 409 {
		t.Fatalf("removing the primary: %v", err)
	}
	if kr := step("remove", oldKey); len(kr.Keys) != 1 || kr.Keys[0] != enc(newKey) {
		t.Fatalf("remove: %+v", kr)
	}
	// Every server now refuses the old key and takes the new one (a
	// follower applies the keyring it commits within half a second; the
	// agents, which heartbeat every 150 ms here, may report theirs first).
	for i, r := range c.Replicas {
		for n, tc := range []struct {
			key  []byte
			join bool
		}{{oldKey, false}, {newKey, true}} {
			var err error
			try := 0
			if !Eventually(10*time.Second, func() bool {
				try++ // a name of its own each time: a refused join must be the key's doing
				ml, cerr := gossip.Create(gossip.Options{Name: fmt.Sprintf("probe-%d-%d-%d", i, n, try), BindHost: "127.0.0.1", Key: tc.key, Tune: FastGossip})
				if cerr != nil {
					t.Fatal(cerr)
				}
				_, err = ml.Join([]string{r.Cfg.GossipAddr})
				_ = ml.Shutdown()
				return (err == nil) == tc.join
			}) {
				t.Errorf("%s with the %s key: join error %v", r.Cfg.ID, map[bool]string{true: "new", false: "old"}[tc.join], err)
			}
		}
	}
	// Neither agent was suspected while the keyring changed under it. The
	// restart below is checked apart: an agent that is stopped may well be
	// suspected while it is gone, which says nothing about the keys.
	noVerdicts := func(id, during string) {
		t.Helper()
		for _, ev := range node(t, cl, id).Events {
			if ev.Kind == "suspect" || ev.Kind == "down" {
				t.Errorf("%s went %s %s: %+v", id, ev.Kind, during, ev)
			}
		}
	}
	for id := range agents {
		noVerdicts(id, "during the rotation")
	}
	// A restart with only the old key configured: the saved keyring wins.
	agents["k1"].Stop()
	agents["k1"] = c.StartAgent(agent.Config{ID: "k1", GossipKey: oldKey, DataDir: dirs["k1"], Slots: 1})
	WaitRegistered(t, agents["k1"])
	if !Eventually(20*time.Second, func() bool { return gossiping(cl, "k1") }) {
		t.Fatal("the restarted agent never gossiped with the rotated key")
	}
	noVerdicts("k2", "while the other agent restarted")
	audit, err := cl.AuditLog(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(audit.Entries); n < 4 {
		t.Errorf("the rotation's steps are not all in the audit trail: %+v", audit.Entries)
	}
}

func bytesOf(b byte, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}
