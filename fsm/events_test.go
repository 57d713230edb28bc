package fsm

import (
	"encoding/json"
	"strings"
	"testing"

	"herd/scheduler"
)

// stringEvent is TimelineEvent as it was, its kind a string.
type stringEvent struct {
	Index   uint64 `json:"index"`
	Time    Stamp  `json:"time"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// Every kind herd writes reads and writes as its name: the form the string
// field it replaced had in snapshots, archives and the API.
func TestEventKindsReadAndWriteAsTheirNames(t *testing.T) {
	written := []string{"queued", "waiting", "node_selected", "started", "finished", "failed", "cancelled",
		"stale_result_rejected", "registered", "down", "management", "ready", "suspect", "condition", "agent", "refused",
		"profile", "tier", "quarantine", "health_check", "blame", "slow", "input_unavailable"}
	seen := map[EventKind]string{}
	for _, name := range written {
		k, ok := EventKindOf(name)
		if !ok || k == 0 || k.String() != name {
			t.Fatalf("EventKindOf(%q) = %d (%q), %v", name, k, k, ok)
		}
		if other, dup := seen[k]; dup {
			t.Fatalf("%q and %q are both kind %d", name, other, k)
		}
		seen[k] = name
		old, _ := json.Marshal(stringEvent{Index: 7, Time: 9, Kind: name, Message: "m"})
		got, err := json.Marshal(TimelineEvent{Index: 7, Time: 9, Kind: k, Message: "m"})
		if err != nil || string(got) != string(old) {
			t.Fatalf("%s: JSON %s (%v), want %s", name, got, err, old)
		}
		var back TimelineEvent
		if err := json.Unmarshal(old, &back); err != nil || back.Kind != k {
			t.Fatalf("%s: read back as %v (%v)", name, back.Kind, err)
		}
	}
	if len(seen) != len(eventKindNames)-1 {
		t.Fatalf("%d kinds named, %d listed here: a kind herd writes is missing from the list", len(eventKindNames)-1, len(seen))
	}
	// A liveness transition's event is named by the liveness, lower case.
	for _, l := range []scheduler.Liveness{scheduler.LivenessReady, scheduler.LivenessSuspect, scheduler.LivenessDown} {
		if got := livenessEvent(l).String(); got != strings.ToLower(string(l)) {
			t.Errorf("liveness %s: event %q", l, got)
		}
	}
}

// A kind this version does not write (a newer version's snapshot) is kept
// as read, and the same name is the same kind each time.
func TestUnknownEventKindIsKept(t *testing.T) {
	in, _ := json.Marshal(stringEvent{Index: 3, Time: 4, Kind: "rebooted_by_operator", Message: "x"})
	var a, b TimelineEvent
	if err := json.Unmarshal(in, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(in, &b); err != nil {
		t.Fatal(err)
	}
	if a.Kind != b.Kind || a.Kind == 0 || int(a.Kind) < len(eventKindNames) {
		t.Fatalf("kinds %d and %d for one unknown name", a.Kind, b.Kind)
	}
	out, err := json.Marshal(a)
	if err != nil || string(out) != string(in) {
		t.Fatalf("written back as %s (%v), want %s", out, err, in)
	}
	var empty TimelineEvent
	if err := json.Unmarshal([]byte(`{"kind":""}`), &empty); err != nil || empty.Kind != 0 {
		t.Fatalf("empty kind read as %d (%v)", empty.Kind, err)
	}
}
