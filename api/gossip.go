package api

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// Gossip: servers and agents are members of one memberlist pool. Each
// member's metadata says who it is; agents send small heartbeat messages
// to the servers; the leader sends wake messages to hibernating agents.

// Member roles in the gossip pool.
const (
	RoleServer = "server"
	RoleAgent  = "agent"
)

// MaxMetaBytes keeps metadata well under memberlist's 512-byte limit
// (memberlist panics above it).
const MaxMetaBytes = 400

// GossipMeta is a member's metadata, msgpack-encoded.
type GossipMeta struct {
	Role        string `codec:"r"`
	ID          string `codec:"i"`
	HTTP        string `codec:"h,omitempty"`
	FreeSlots   int    `codec:"f,omitempty"`
	Running     int    `codec:"n,omitempty"`
	Load        int    `codec:"l,omitempty"` // 1-minute load average × 100
	Hibernating bool   `codec:"z,omitempty"`
	Session     uint64 `codec:"s,omitempty"`
	// Version is the member's build. A decoder skips fields it does not
	// know, so a newer build may add more.
	Version string `codec:"v,omitempty"`
}

var msgpackHandle = &codec.MsgpackHandle{}

// Encode returns the metadata as msgpack, refusing what would not fit.
func (m GossipMeta) Encode() ([]byte, error) {
	var buf bytes.Buffer
	if err := codec.NewEncoder(&buf, msgpackHandle).Encode(m); err != nil {
		return nil, fmt.Errorf("encode gossip meta: %w", err)
	}
	if buf.Len() > MaxMetaBytes {
		return nil, fmt.Errorf("gossip meta of %d bytes exceeds %d", buf.Len(), MaxMetaBytes)
	}
	return buf.Bytes(), nil
}

// DecodeGossipMeta reads metadata written by Encode.
func DecodeGossipMeta(b []byte) (GossipMeta, error) {
	var m GossipMeta
	if len(b) == 0 {
		return m, errors.New("empty gossip meta")
	}
	if err := codec.NewDecoderBytes(b, msgpackHandle).Decode(&m); err != nil {
		return m, fmt.Errorf("decode gossip meta: %w", err)
	}
	return m, nil
}

// Gossip message kinds (first byte of a user message).
const (
	GossipHeartbeat byte = 'h'
	GossipWake      byte = 'w'
	GossipLeaseAck  byte = 'l'
)

// GossipLeaseAckMsg is the leader's answer to a heartbeat of a node's
// current session: the node's running attempts are its for LeaseMs from
// the moment the agent sent heartbeat Seq (see the agent's lease).
type GossipLeaseAckMsg struct {
	Node    string `codec:"n"`
	Session uint64 `codec:"s"`
	Seq     uint64 `codec:"q"`
	LeaseMs int64  `codec:"l"`
	// KeyringIndex is the cluster's gossip keyring index: an agent that
	// runs an older one fetches it (0: not said, from an older server).
	KeyringIndex uint64 `codec:"k,omitempty"`
}

// GossipHeartbeatMsg is an agent's proof of life: Seq counts up by one per
// heartbeat, so a server can tell lost heartbeats from late ones.
type GossipHeartbeatMsg struct {
	Node    string `codec:"n"`
	Session uint64 `codec:"s"`
	Seq     uint64 `codec:"q"`
	// KeyringIndex is the gossip keyring index the agent runs (0: never
	// rotated, or an older agent that does not say).
	KeyringIndex uint64 `codec:"k,omitempty"`
}

// EncodeGossipMsg frames a message: kind byte, then msgpack.
func EncodeGossipMsg(kind byte, v any) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte(kind)
	if err := codec.NewEncoder(&buf, msgpackHandle).Encode(v); err != nil {
		return nil, fmt.Errorf("encode gossip message: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeGossipMsg reads a message framed by EncodeGossipMsg into v.
func DecodeGossipMsg(b []byte, v any) error {
	if len(b) < 1 {
		return errors.New("empty gossip message")
	}
	if err := codec.NewDecoderBytes(b[1:], msgpackHandle).Decode(v); err != nil {
		return fmt.Errorf("decode gossip message: %w", err)
	}
	return nil
}

// GossipInfo tells an agent how to join the pool.
type GossipInfo struct {
	// Servers are the gossip addresses (host:port) of the servers.
	Servers []string `json:"servers"`
	// Encrypted says the pool requires the gossip key.
	Encrypted bool `json:"encrypted"`
}

// NodeObservation is how the answering replica currently sees a node's
// liveness from gossip: the heartbeat interval in force (stretched when
// heartbeats get lost), consecutive misses and the loss estimate.
type NodeObservation struct {
	IntervalMs  int64   `json:"interval_ms"`
	Misses      int     `json:"misses"`
	Loss        float64 `json:"loss"`
	LastHeard   string  `json:"last_heard,omitempty"`
	GossipState string  `json:"gossip_state"`
	Hibernating bool    `json:"hibernating"`
}
