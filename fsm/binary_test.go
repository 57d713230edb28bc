package fsm

import (
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"herd/scheduler"
)

// TestReserveBinaryRoundTrip: any reservation decodes to what was encoded,
// and every strict prefix of an encoding is refused, not misread.
func TestReserveBinaryRoundTrip(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		r := ReserveRequest{
			TaskID: rapid.String().Draw(rt, "task"), AttemptID: rapid.String().Draw(rt, "attempt"),
			Number: rapid.Int().Draw(rt, "number"), NodeID: rapid.String().Draw(rt, "node"),
			SessionGeneration: rapid.Uint64().Draw(rt, "session"), Score: rapid.Int64().Draw(rt, "score"),
			HeartbeatTTL: time.Duration(rapid.Int64().Draw(rt, "ttl")),
		}
		if rapid.Bool().Draw(rt, "has-time") {
			r.Now = time.Unix(rapid.Int64Range(-1<<40, 1<<40).Draw(rt, "sec"), rapid.Int64Range(0, 999_999_999).Draw(rt, "nsec")).UTC()
		}
		enc := EncodeReserve(r)
		h, payload, err := decodeHeader(enc)
		if err != nil || h.typ != MsgReserve || !h.binary {
			rt.Fatalf("header %+v, %v", h, err)
		}
		got, err := decodeReserve(payload)
		if err != nil {
			rt.Fatalf("decode: %v", err)
		}
		if !reflect.DeepEqual(*got, r) {
			rt.Fatalf("round trip: got %+v, want %+v", *got, r)
		}
		cut := rapid.IntRange(0, len(payload)-1).Draw(rt, "cut")
		if _, err := decodeReserve(payload[:cut]); err == nil {
			rt.Fatalf("a %d-byte prefix of a %d-byte reservation decoded", cut, len(payload))
		}
	})
}

// TestBinaryAndJSONReservationsApplyAlike: the two encodings of the same
// reservation leave replicas in the same state.
func TestBinaryAndJSONReservationsApplyAlike(t *testing.T) {
	now := epoch.Add(1234567891 * time.Nanosecond)
	hashes := map[string]string{}
	for name, encode := range map[string]func(ReserveRequest) []byte{
		"json":   func(r ReserveRequest) []byte { return mustEncode(t, MsgReserve, r) },
		"binary": EncodeReserve,
	} {
		h := newHarness(t)
		n := h.register("n1", scheduler.Resources{CPUMillis: 4000, MemoryMB: 4096}, 4)
		h.submit("t1", scheduler.Resources{CPUMillis: 100, MemoryMB: 64}, 1)
		res := h.applyBatch(encode(ReserveRequest{TaskID: "t1", AttemptID: "a1", Number: 1, NodeID: "n1", SessionGeneration: n.SessionGeneration, Score: 7, Now: now, HeartbeatTTL: time.Minute}))
		if _, ok := res[0].(*ReserveResult); !ok {
			t.Fatalf("%s reservation: %v", name, res[0])
		}
		sum, err := h.f.State().Hash()
		if err != nil {
			t.Fatal(err)
		}
		hashes[name] = sum
	}
	if hashes["json"] != hashes["binary"] {
		t.Fatalf("states differ: %v", hashes)
	}
}
