package fsm

import (
	"fmt"
	"strings"
	"sync"

	"herd/scheduler"
)

// EventKind says what a timeline event records. It is a byte rather than
// its name (a 16-byte string header in every event) and reads and writes
// as the name, in JSON and snapshots alike, so the wire forms are those
// of the string it replaced.
type EventKind uint8

// The event kinds herd writes. Every kind ever written must stay here:
// snapshots and archives keep them.
const (
	EventQueued EventKind = iota + 1
	EventWaiting
	EventNodeSelected
	EventStarted
	EventFinished
	EventFailed
	EventCancelled
	EventStaleResultRejected
	// Node events: a registration, a verdict of DOWN, a management change
	// and the liveness transitions.
	EventRegistered
	EventDown
	EventManagement
	EventReady
	EventSuspect
	// EventCondition: the node's agent reported a problem, or that it
	// cleared.
	EventCondition
	// EventAgent: what the node's agent did on its own (it stopped
	// attempts when its lease ran out).
	EventAgent
	// EventRefused: a request made with the node's credentials was
	// refused for acting beyond the node.
	EventRefused
	// Profile events: a measured profile committed, a tier change, a
	// quarantine begun or ended, a health check asked for or answered.
	EventProfile
	EventTier
	EventQuarantine
	EventHealthCheck
	// EventBlame: the evidence moved the blame for failures between the
	// task and the nodes it failed on.
	EventBlame
	// EventSlow: an attempt ran far past its class's fleet median.
	EventSlow
	// EventInputUnavailable: an attempt could not fetch an input from any
	// live node; it used none of the task's attempts.
	EventInputUnavailable
)

var eventKindNames = [...]string{
	EventQueued: "queued", EventWaiting: "waiting", EventNodeSelected: "node_selected", EventStarted: "started",
	EventFinished: "finished", EventFailed: "failed", EventCancelled: "cancelled",
	EventStaleResultRejected: "stale_result_rejected", EventRegistered: "registered", EventDown: "down",
	EventManagement: "management", EventReady: "ready", EventSuspect: "suspect",
	EventCondition: "condition", EventAgent: "agent", EventRefused: "refused",
	EventProfile: "profile", EventTier: "tier", EventQuarantine: "quarantine", EventHealthCheck: "health_check",
	EventBlame: "blame", EventSlow: "slow", EventInputUnavailable: "input_unavailable",
}

// otherEventKinds numbers, in this process only, kinds read that this
// version does not write (a snapshot of a newer version): they are kept
// by name, never lost, and written back as read. It is process-wide, not
// an FSM's, because a kind is turned back into its name wherever an event
// is written (API answers, snapshots, copies of records between stores),
// with no FSM at hand. It cannot make replicas differ: numbers are only
// added, under the lock, and never leave the process (commands and
// snapshots carry names), so every replica applies and writes the same
// names whatever numbers it gave them.
var otherEventKinds struct {
	sync.RWMutex
	names  []string // kind len(eventKindNames)+i is names[i]
	byName map[string]EventKind
}

// EventKindOf returns the kind named name, numbering a name this version
// does not know; false when no number is left for another.
func EventKindOf(name string) (EventKind, bool) {
	for k, n := range eventKindNames {
		if n == name && k != 0 {
			return EventKind(k), true
		}
	}
	if name == "" {
		return 0, true
	}
	o := &otherEventKinds
	o.RLock()
	k, ok := o.byName[name]
	o.RUnlock()
	if ok {
		return k, true
	}
	o.Lock()
	defer o.Unlock()
	if k, ok := o.byName[name]; ok {
		return k, true
	}
	next := len(eventKindNames) + len(o.names)
	if next > 255 {
		return 0, false
	}
	if o.byName == nil {
		o.byName = map[string]EventKind{}
	}
	o.names = append(o.names, name)
	o.byName[name] = EventKind(next)
	return EventKind(next), true
}

// String is the kind's name ("" for the zero kind).
func (k EventKind) String() string {
	if int(k) < len(eventKindNames) {
		return eventKindNames[k]
	}
	o := &otherEventKinds
	o.RLock()
	defer o.RUnlock()
	if i := int(k) - len(eventKindNames); i < len(o.names) {
		return o.names[i]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// MarshalText writes the kind's name.
func (k EventKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads a kind's name; one this version does not write is
// kept as it reads.
func (k *EventKind) UnmarshalText(b []byte) error {
	v, ok := EventKindOf(string(b))
	if !ok {
		return fmt.Errorf("event kind %q: too many kinds this version does not know", b)
	}
	*k = v
	return nil
}

// livenessEvent is the event of a node's move to liveness l (named as the
// liveness in lower case).
func livenessEvent(l scheduler.Liveness) EventKind {
	switch l {
	case scheduler.LivenessReady:
		return EventReady
	case scheduler.LivenessSuspect:
		return EventSuspect
	case scheduler.LivenessDown:
		return EventDown
	}
	k, _ := EventKindOf(strings.ToLower(string(l)))
	return k
}
