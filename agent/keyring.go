package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"herd/internal/gossip"

	"github.com/hashicorp/memberlist"
)

// keyringFile keeps the gossip keyring the agent last fetched, so that a
// restart after a rotation joins with the keys in use rather than the
// configured one, which may have been removed since.
const keyringFile = "gossip-keyring.json"

type savedKeyring struct {
	Index   uint64   `json:"index"`
	Keys    []string `json:"keys"`
	Primary string   `json:"primary"`
}

// agentKeyring is the pool's keys in use by this agent.
type agentKeyring struct {
	mu    sync.Mutex // one fetch at a time
	ring  *memberlist.Keyring
	index uint64
	// running mirrors index for readers that must not wait on a fetch
	// (the gossip callbacks).
	running atomic.Uint64
}

// loadKeyring makes the agent's keyring: the one saved in its data
// directory, or else the configured key alone.
func (a *Agent) loadKeyring() (*memberlist.Keyring, error) {
	raw, err := os.ReadFile(filepath.Join(a.cfg.DataDir, keyringFile))
	if err == nil {
		var sk savedKeyring
		if err := json.Unmarshal(raw, &sk); err == nil {
			if keys, primary, err := decodeKeyring(sk.Keys, sk.Primary); err == nil {
				if kr, err := memberlist.NewKeyring(keys, primary); err == nil {
					a.keyring.ring, a.keyring.index = kr, sk.Index
					a.keyring.running.Store(sk.Index)
					a.logger.Info("gossip keyring loaded from the data directory", "index", sk.Index, "keys", len(keys))
					return kr, nil
				}
			}
		}
		a.logger.Warn("ignoring an unreadable saved gossip keyring; using the configured key", "file", keyringFile)
	}
	kr, err := memberlist.NewKeyring(nil, a.cfg.GossipKey)
	if err != nil {
		return nil, fmt.Errorf("gossip key: %w", err)
	}
	a.keyring.ring = kr
	return kr, nil
}

func decodeKeyring(keys []string, primary string) ([][]byte, []byte, error) {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		b, err := base64.StdEncoding.DecodeString(k)
		if err != nil {
			return nil, nil, err
		}
		out[i] = b
	}
	p, err := base64.StdEncoding.DecodeString(primary)
	if err != nil {
		return nil, nil, err
	}
	return out, p, nil
}

// keyringIndex is the replicated keyring the agent runs (0: the
// configured key).
func (a *Agent) keyringIndex() uint64 { return a.keyring.running.Load() }

// refreshKeyring fetches the keyring when the cluster's differs from the
// one the agent runs, applies it to its gossip and saves it.
// With force it asks whatever the index (at start, before joining).
func (a *Agent) refreshKeyring(ctx context.Context, clusterIndex uint64, force bool) {
	a.keyring.mu.Lock()
	defer a.keyring.mu.Unlock()
	if a.keyring.ring == nil || (!force && (clusterIndex == 0 || clusterIndex == a.keyring.index)) {
		return
	}
	kr, err := a.client.GossipKeyring(ctx)
	if err != nil {
		a.logger.Warn("could not fetch the gossip keyring", "error", err)
		return
	}
	if kr.Index == 0 || kr.Index == a.keyring.index {
		return // never rotated (every member runs its configured key), or current
	}
	keys, primary, err := decodeKeyring(kr.Keys, kr.Primary)
	if err != nil {
		a.logger.Warn("the servers sent an unreadable gossip keyring", "error", err)
		return
	}
	if err := gossip.SetKeys(a.keyring.ring, keys, primary); err != nil {
		a.logger.Warn("could not apply the gossip keyring", "index", kr.Index, "error", err)
		return
	}
	b, _ := json.Marshal(savedKeyring{Index: kr.Index, Keys: kr.Keys, Primary: kr.Primary})
	if err := os.WriteFile(filepath.Join(a.cfg.DataDir, keyringFile), b, 0o600); err != nil {
		a.logger.Warn("could not save the gossip keyring", "error", err)
	}
	a.keyring.index = kr.Index
	a.keyring.running.Store(kr.Index)
	a.logger.Info("gossip keyring applied", "index", kr.Index, "keys", len(keys))
	// Say so at once (an HTTP heartbeat carries the index): an operator
	// rotating keys waits for every node to run the new keyring.
	select {
	case a.renewNow <- struct{}{}:
	default:
	}
}
