package cluster

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"herd/api"
	"herd/fsm"
	"herd/internal/gossip"
	"herd/scheduler"
)

// keyringReports is what each node's agent last said it runs (the leader's
// memory only: the answer to "who still lacks the new key").
type keyringReports struct {
	mu   sync.Mutex
	seen map[string]uint64
}

func (k *keyringReports) report(node string, index uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.seen == nil {
		k.seen = map[string]uint64{}
	}
	k.seen[node] = index
}

func (k *keyringReports) of(node string) uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.seen[node]
}

func encodeKeys(keys [][]byte) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = base64.StdEncoding.EncodeToString(k)
	}
	return out
}

// keyringEndpoints serve the gossip keyring's rotation: the replicated
// keyring and who runs it, and its changes. They hold the replica as a
// proposer, this replica's gossip member (nil without gossip) whose
// keyring they keep in step with the replicated one, and the agents'
// reports of the keyring they run (the leader's memory).
type keyringEndpoints struct {
	r      proposer
	gossip *serverGossip
	seen   *keyringReports
	logger hclog.Logger
}

// GossipKeyring answers the replicated keyring, and which live nodes'
// agents have not reported running it (leader-only: the reports are the
// leader's).
func (e *keyringEndpoints) GossipKeyring() (api.GossipKeyring, error) {
	if e.gossip == nil || e.gossip.keyring == nil {
		return api.GossipKeyring{}, fmt.Errorf("gossip on %s is not encrypted: there is no keyring: %w", e.r.ID(), api.ErrBadRequest)
	}
	st := e.r.State()
	kr := st.GossipKeyring()
	out := api.GossipKeyring{Index: kr.Index}
	if kr.Index == 0 {
		// Never rotated: the configured key of every member.
		keys := e.gossip.keyring.GetKeys()
		out.Keys, out.Primary = encodeKeys(keys), base64.StdEncoding.EncodeToString(e.gossip.keyring.GetPrimaryKey())
	} else {
		out.Keys, out.Primary = encodeKeys(kr.Keys), base64.StdEncoding.EncodeToString(kr.Primary)
	}
	nodes, _ := st.Nodes()
	for _, n := range nodes {
		if n.Liveness == scheduler.LivenessDown {
			continue
		}
		if e.seen.of(n.ID) == kr.Index {
			out.NodesCurrent++
		} else {
			out.NodesBehind = append(out.NodesBehind, n.ID)
		}
	}
	sort.Strings(out.NodesBehind)
	return out, nil
}

// ChangeGossipKeyring installs, uses or removes a key (leader-only).
func (e *keyringEndpoints) ChangeGossipKeyring(ctx context.Context, req api.GossipKeyringRequest) (api.GossipKeyring, error) {
	if !e.r.IsLeader() {
		return api.GossipKeyring{}, fmt.Errorf("%s: %w", e.r.ID(), api.ErrNotLeader)
	}
	if e.gossip == nil || e.gossip.keyring == nil {
		return api.GossipKeyring{}, fmt.Errorf("gossip is not encrypted: start the servers with a gossip_key to rotate keys: %w", api.ErrBadRequest)
	}
	key, err := base64.StdEncoding.DecodeString(req.Key)
	if err != nil {
		return api.GossipKeyring{}, fmt.Errorf("key is not base64: %w", api.ErrBadRequest)
	}
	// The first change starts from the keys the members run with.
	base := [][]byte{e.gossip.keyring.GetPrimaryKey()}
	for _, k := range e.gossip.keyring.GetKeys() {
		if !slices.Equal(k, base[0]) {
			base = append(base, k)
		}
	}
	if _, _, err := e.r.apply(ctx, fsm.MsgGossipKeyring, fsm.GossipKeyringRequest{Op: req.Op, Key: key, Base: base}); err != nil {
		return api.GossipKeyring{}, err
	}
	e.syncKeyring()
	return e.GossipKeyring()
}

// keyringLoop applies the replicated keyring to this replica's gossip as
// it commits (checked twice a second).
func (s *Server) keyringLoop() {
	if s.gossip == nil || s.gossip.keyring == nil {
		return
	}
	for s.pause(500 * time.Millisecond) {
		s.keyringEndpoints.syncKeyring()
	}
}

// syncKeyring makes the local keyring what the replicated one says: new
// keys added, the primary used, removed keys dropped.
func (e *keyringEndpoints) syncKeyring() {
	g := e.gossip
	g.keyringMu.Lock()
	defer g.keyringMu.Unlock()
	kr := e.r.State().GossipKeyring()
	if kr.Index == 0 || kr.Index == g.keyringIndex {
		return
	}
	if err := gossip.SetKeys(g.keyring, kr.Keys, kr.Primary); err != nil {
		e.logger.Error("could not apply the gossip keyring", "index", kr.Index, "error", err)
		return
	}
	g.keyringIndex = kr.Index
	e.logger.Info("gossip keyring applied", "index", kr.Index, "keys", len(kr.Keys))
}
