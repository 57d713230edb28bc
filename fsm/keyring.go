package fsm

import "slices"

// GossipKeyring is the pool's replicated keyring: the keys every member
// accepts and the primary one it encrypts with. Servers apply it to their
// memberlist as it commits; agents fetch it when their heartbeat says it
// changed. Empty until an operator first changes it (members then use
// their configured key).
type GossipKeyring struct {
	Keys    [][]byte `json:"keys"`
	Primary []byte   `json:"primary"`
	// Index is the entry that last changed it.
	Index uint64 `json:"index"`
}

// Keyring operations.
const (
	KeyringInstall = "install"
	KeyringUse     = "use"
	KeyringRemove  = "remove"
)

// GossipKeyringRequest changes the keyring. Base is the keyring the
// members run with when none is replicated yet (the leader's configured
// key), so that the first change starts from it.
type GossipKeyringRequest struct {
	Op   string   `json:"op"`
	Key  []byte   `json:"key"`
	Base [][]byte `json:"base,omitempty"`
}

func validGossipKey(k []byte) bool { return len(k) == 16 || len(k) == 24 || len(k) == 32 }

func applyGossipKeyring(db *store, index uint64, r *GossipKeyringRequest) (any, error) {
	if !validGossipKey(r.Key) {
		return nil, reject(RejectInvalid, "a gossip key is 16, 24 or 32 bytes, not %d", len(r.Key))
	}
	kr := db.keyring
	if len(kr.Keys) == 0 {
		for _, k := range r.Base {
			if !validGossipKey(k) {
				return nil, reject(RejectInvalid, "base key of %d bytes", len(k))
			}
			kr.Keys = append(kr.Keys, slices.Clone(k))
		}
		if len(kr.Keys) > 0 {
			kr.Primary = kr.Keys[0]
		}
	} else {
		kr.Keys = slices.Clone(kr.Keys)
	}
	has := slices.IndexFunc(kr.Keys, func(k []byte) bool { return slices.Equal(k, r.Key) })
	switch r.Op {
	case KeyringInstall:
		if has < 0 {
			kr.Keys = append(kr.Keys, slices.Clone(r.Key))
		}
		if kr.Primary == nil {
			kr.Primary = kr.Keys[0]
		}
	case KeyringUse:
		if has < 0 {
			return nil, reject(RejectConflict, "install the key before using it")
		}
		kr.Primary = kr.Keys[has]
	case KeyringRemove:
		if has < 0 {
			return nil, reject(RejectNotFound, "the key is not installed")
		}
		if slices.Equal(kr.Primary, r.Key) {
			return nil, reject(RejectConflict, "the primary key cannot be removed: use another first")
		}
		kr.Keys = slices.Delete(kr.Keys, has, has+1)
	default:
		return nil, reject(RejectInvalid, "keyring operation %q is not install, use or remove", r.Op)
	}
	kr.Index = index
	db.keyring = kr
	out := kr
	return &out, nil
}

// GossipKeyring is the replicated keyring (Index 0: never changed).
func (s *State) GossipKeyring() GossipKeyring { return s.st.keyring }
