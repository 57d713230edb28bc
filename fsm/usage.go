package fsm

import "herd/scheduler"

// nodeUsage is what a node's live (reserved and running) attempts hold:
// the sum of their resources and their count, and the index that last
// changed either. It is kept apart from the node's record because it
// changes with every reservation and every attempt's end, and a record
// replaced for each would be copied whole (about 500 bytes) on every
// replica at every placement. A node's record carries its usage as of
// the record's last write (putNode stamps it); current brings a record
// up to date for a reader.
type nodeUsage struct {
	NodeID      string
	Reserved    scheduler.Resources
	Running     int
	ModifyIndex uint64
}

// usageOf returns a node's usage; nil for a node that never held a live
// attempt.
func (s *store) usageOf(id string) *nodeUsage {
	if s.w != nil {
		return s.w.usage[id]
	}
	u, _ := s.usage.Get(&nodeUsage{NodeID: id})
	return u
}

// setUsage records a node's usage as of index. Node list watchers wake
// (they show what nodes hold); the node's own topic is touched by the
// attempt that changed it.
func (s *store) setUsage(id string, reserved scheduler.Resources, running int, index uint64) {
	u := &nodeUsage{NodeID: id, Reserved: reserved, Running: running, ModifyIndex: index}
	s.usage.ReplaceOrInsert(u)
	if s.w != nil {
		s.w.usage[id] = u
	}
	s.touch(topicNodes)
}

// addUsage adds (or, with sign -1, takes away) one live attempt holding
// res to a node's usage.
func (s *store) addUsage(id string, res scheduler.Resources, sign int, index uint64) {
	var reserved scheduler.Resources
	running := 0
	if u := s.usageOf(id); u != nil {
		reserved, running = u.Reserved, u.Running
	}
	if sign < 0 {
		reserved = reserved.Sub(res)
	} else {
		reserved = reserved.Add(res)
	}
	s.setUsage(id, reserved, running+sign, index)
}

// current returns n with its node's current usage: n itself when its
// record is up to date, otherwise a copy brought up to date.
func (s *store) current(n *Node) *Node {
	u := s.usageOf(n.ID)
	if u == nil || u.Reserved == n.Reserved && u.Running == n.RunningAttempts && u.ModifyIndex <= n.ModifyIndex {
		return n
	}
	c := n.clone()
	s.stampUsage(c)
	return c
}

// stampUsage sets a record no view has seen yet to its node's current
// usage.
func (s *store) stampUsage(n *Node) {
	if u := s.usageOf(n.ID); u != nil {
		n.Reserved, n.RunningAttempts = u.Reserved, u.Running
		n.ModifyIndex = max(n.ModifyIndex, u.ModifyIndex)
	} else {
		n.Reserved, n.RunningAttempts = scheduler.Resources{}, 0
	}
}
