// Package gossip creates a member of herd's memberlist pool with the
// settings servers and agents share, so that both join the pool alike.
package gossip

import (
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
)

// Options describe one member.
type Options struct {
	// Name is the member's name in the pool: the server or node id.
	Name string
	// BindHost and BindPort are where it listens (UDP and TCP); bound to
	// one address, memberlist advertises it with the real port, also when
	// the port is chosen by the kernel (0).
	BindHost string
	BindPort int
	// AdvertiseHost and AdvertisePort, when set, are what others reach.
	AdvertiseHost string
	AdvertisePort int
	// Key, when set, is the pool's AES key: every packet in and out is
	// encrypted and verified.
	Key []byte
	// DeadNodeReclaimTime lets a name dead this long be taken again by a
	// member on another address (a restarted agent); 0 keeps
	// memberlist's default.
	DeadNodeReclaimTime time.Duration
	// Keyring, when set, is used instead of Key: the keys the member
	// accepts and the one it encrypts with, changed in place as the
	// cluster rotates them.
	Keyring  *memberlist.Keyring
	Delegate memberlist.Delegate
	Events   memberlist.EventDelegate
	Merge    memberlist.MergeDelegate
	Logger   hclog.Logger
	// Tune and WrapTransport let tests shrink memberlist's timings and
	// inject faults into its transport.
	Tune          func(*memberlist.Config)
	WrapTransport func(memberlist.Transport) memberlist.Transport
}

// Create starts the member: it listens, and joins nobody yet.
func Create(o Options) (*memberlist.Memberlist, error) {
	mc := memberlist.DefaultLANConfig()
	mc.Name = o.Name
	// The pool's packets are small (liveness and a little metadata): LZW
	// saves little on them and allocates a 64 KiB table for each packet
	// sent. Peers that compress are still understood.
	mc.EnableCompression = false
	mc.BindAddr, mc.BindPort = o.BindHost, o.BindPort
	if o.AdvertiseHost != "" {
		mc.AdvertiseAddr, mc.AdvertisePort = o.AdvertiseHost, o.AdvertisePort
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	// memberlist writes "[DEBUG] memberlist: …" lines (a stream opened,
	// a probe sent) through a standard logger: read their level from
	// them, so its chatter is DEBUG and an operator's INFO log holds what
	// they act on.
	mc.Logger = o.Logger.Named("gossip").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true, InferLevelsWithTimestamp: true})
	mc.LogOutput = nil
	if o.DeadNodeReclaimTime > 0 {
		mc.DeadNodeReclaimTime = o.DeadNodeReclaimTime
	}
	mc.Delegate, mc.Events = o.Delegate, o.Events
	if o.Merge != nil {
		mc.Merge = o.Merge
	}
	if o.Keyring != nil {
		mc.Keyring = o.Keyring
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	} else if o.Key != nil {
		mc.SecretKey = o.Key
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	if o.Tune != nil {
		o.Tune(mc)
	}
	host := o.BindHost
	if host == "" {
		host = "0.0.0.0"
	}
	nt, err := newTransport(host, o.BindPort, mc.Logger)
	if err != nil {
		return nil, err
	}
	mc.BindPort = nt.port()
	mc.Transport = nt
	if o.WrapTransport != nil {
		mc.Transport = o.WrapTransport(nt)
	}
	m, err := memberlist.Create(mc)
	if err != nil {
		_ = nt.Shutdown()
		return nil, err
	}
	return m, nil
}

// SetKeys makes kr hold exactly keys, with primary the key in use: new
// keys are added first and old ones removed last, so that the member
// never refuses a key a peer may still be sending with.
func SetKeys(kr *memberlist.Keyring, keys [][]byte, primary []byte) error {
	for _, k := range keys {
		if err := kr.AddKey(k); err != nil {
			return fmt.Errorf("install gossip key: %w", err)
		}
	}
	if err := kr.UseKey(primary); err != nil {
		return fmt.Errorf("use gossip key: %w", err)
	}
	for _, k := range kr.GetKeys() {
		if !slices.ContainsFunc(keys, func(w []byte) bool { return slices.Equal(w, k) }) {
			if err := kr.RemoveKey(k); err != nil {
				return fmt.Errorf("remove gossip key: %w", err)
			}
		}
	}
	return nil
}
