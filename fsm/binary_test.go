package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"herd/scheduler"
	"herd/spec"
)

// TestReserveBinaryRoundTrip: any reservation decodes to what was encoded,
// and every strict prefix of an encoding is refused, not misread.
func TestReserveBinaryRoundTrip(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		r := ReserveRequest{
			TaskID: rapid.String().Draw(rt, "task"), AttemptID: rapid.String().Draw(rt, "attempt"),
			Number: rapid.Int().Draw(rt, "number"), NodeID: rapid.String().Draw(rt, "node"),
			SessionGeneration: rapid.Uint64().Draw(rt, "session"), Score: rapid.Int64().Draw(rt, "score"),
			Now: drawTime(rt, "now"), HeartbeatTTL: time.Duration(rapid.Int64().Draw(rt, "ttl")), Backup: rapid.Bool().Draw(rt, "backup"),
		}
		checkBinary(rt, EncodeReserve(r), MsgReserve, decodeReserve, r)
	})
}

// drawTime is a zero time or an instant in UTC, as commands carry them.
func drawTime(rt *rapid.T, label string) time.Time {
	if !rapid.Bool().Draw(rt, label+"-set") {
		return time.Time{}
	}
	return time.Unix(rapid.Int64Range(-1<<40, 1<<40).Draw(rt, label+"-sec"), rapid.Int64Range(0, 999_999_999).Draw(rt, label+"-nsec")).UTC()
}

// drawMap is nil or a non-empty map: the binary form reads an empty map
// as nil, as JSON does for these omitempty fields.
func drawMap(rt *rapid.T, label string) map[string]string {
	m := rapid.MapOf(rapid.String(), rapid.String()).Draw(rt, label)
	if len(m) == 0 {
		return nil
	}
	return m
}

// checkBinary decodes enc as a binary command of type want and compares
// it with the request it was made from; every strict prefix of the
// payload must be refused.
func checkBinary[R any](rt *rapid.T, enc []byte, want MessageType, decode func([]byte) (*R, error), r R) {
	h, payload, err := decodeHeader(enc)
	if c, _ := commandOf(h.typ); err != nil || h.typ != want || c.form != formBinary {
		rt.Fatalf("header %+v, %v", h, err)
	}
	got, err := decode(payload)
	if err != nil {
		rt.Fatalf("decode: %v", err)
	}
	if !reflect.DeepEqual(*got, r) {
		rt.Fatalf("round trip: got %+v, want %+v", *got, r)
	}
	cut := rapid.IntRange(0, len(payload)-1).Draw(rt, "cut")
	if _, err := decode(payload[:cut]); err == nil {
		rt.Fatalf("a %d-byte prefix of a %d-byte %s decoded", cut, len(payload), want)
	}
}

// TestBinaryFormsCoverEveryField: a field added to a request (or to the
// spec) must be added to its binary form too, or it would be dropped
// from the log without a word; the round-trip tests below fill each field.
// Unexported fields are not sent (JSON leaves them out too).
func TestBinaryFormsCoverEveryField(t *testing.T) {
	exported := func(typ reflect.Type) int {
		n := 0
		for i := range typ.NumField() {
			if typ.Field(i).IsExported() {
				n++
			}
		}
		return n
	}
	for _, c := range []struct {
		typ    any
		fields int
	}{{SubmitTaskRequest{}, 3}, {TaskSpec{}, 3}, {TaskShape{}, 22}, {scheduler.Resources{}, 4}, {ReserveRequest{}, 9}, {AttemptStartRequest{}, 3}, {AttemptEndRequest{}, 10}, {ExplainRequest{}, 3}} {
		if n := exported(reflect.TypeOf(c.typ)); n != c.fields {
			t.Errorf("%T has %d fields, its binary form %d: update binary.go, then this test", c.typ, n, c.fields)
		}
	}
}

// TestSubmitBinaryRoundTrip: any submission decodes to what was encoded,
// and a cut one is refused.
func TestSubmitBinaryRoundTrip(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		command := rapid.SliceOf(rapid.String()).Draw(rt, "command")
		if len(command) == 0 {
			command = nil
		}
		r := SubmitTaskRequest{ID: rapid.String().Draw(rt, "id"), SubmittedAt: drawTime(rt, "submitted"), Spec: TaskSpec{Name: rapid.String().Draw(rt, "name"), IdempotencyKey: rapid.String().Draw(rt, "key"), TaskShape: &TaskShape{
			Priority: rapid.Int().Draw(rt, "priority"), Command: command, Env: drawMap(rt, "env"),
			Capability: rapid.String().Draw(rt, "cap"), CapabilityVersion: rapid.String().Draw(rt, "capv"),
			RequiredLabels: drawMap(rt, "required"), PreferredLabels: drawMap(rt, "preferred"),
			Resources: scheduler.Resources{CPUMillis: rapid.Int64().Draw(rt, "cpu"), MemoryMB: rapid.Int64().Draw(rt, "mem"),
				GPU: rapid.Int64().Draw(rt, "gpu"), DiskMB: rapid.Int64().Draw(rt, "disk")},
			TimeoutSeconds: rapid.Int64().Draw(rt, "timeout"), MaxAttempts: rapid.Int().Draw(rt, "max"),
			Submitter: rapid.String().Draw(rt, "submitter"), OnDisconnect: rapid.SampledFrom([]string{"", spec.OnDisconnectKeepRunning, "x"}).Draw(rt, "ondisconnect"),
			Class: rapid.String().Draw(rt, "class"), Size: rapid.SampledFrom([]string{"", "small", "large"}).Draw(rt, "size"),
			Tiers: drawTiers(rt), Inputs: drawNames(rt, "inputs"), Outputs: drawNames(rt, "outputs"), InputPaths: drawNames(rt, "paths"),
			Driver: rapid.SampledFrom([]string{"", spec.DriverOCI}).Draw(rt, "driver"), Image: rapid.String().Draw(rt, "image"),
			Network: rapid.SampledFrom([]string{"", spec.NetworkNone}).Draw(rt, "network"), Speculative: rapid.Bool().Draw(rt, "speculative"),
		}}}
		// The decoded request also carries its shape's encoding, the key
		// replicas share shapes by: it must be exactly the shape's.
		decode := func(p []byte) (*SubmitTaskRequest, error) {
			got, err := decodeSubmitTask(p)
			if err != nil {
				return nil, err
			}
			if !bytes.Equal(got.shapeKey, appendShape(nil, got.Spec.TaskShape)) {
				return nil, fmt.Errorf("shape key %x is not the shape's encoding", got.shapeKey)
			}
			got.shapeKey, got.shapeShared = nil, false
			return got, nil
		}
		checkBinary(rt, EncodeSubmitTask(r), MsgSubmitTask, decode, r)
	})
}

// TestTaskCommandsBinaryRoundTrip: the same for explanations, attempt
// starts and ends.
func TestTaskCommandsBinaryRoundTrip(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		switch rapid.IntRange(0, 2).Draw(rt, "kind") {
		case 0:
			r := ExplainRequest{TaskID: rapid.String().Draw(rt, "task"), Summary: rapid.String().Draw(rt, "summary"), Now: drawTime(rt, "now")}
			checkBinary(rt, EncodeExplain(r), MsgExplain, decodeExplain, r)
			return
		case 1:
			r := AttemptStartRequest{AttemptID: rapid.String().Draw(rt, "id"), LeaseVersion: rapid.Uint64().Draw(rt, "lease"), Now: drawTime(rt, "now")}
			checkBinary(rt, EncodeAttemptStart(r), MsgAttemptStart, decodeAttemptStart, r)
			return
		}
		r := AttemptEndRequest{
			AttemptID: rapid.String().Draw(rt, "id"), LeaseVersion: rapid.Uint64().Draw(rt, "lease"),
			State: AttemptState(rapid.String().Draw(rt, "state")), ExitCode: rapid.Int().Draw(rt, "exit"),
			OutputTail: rapid.String().Draw(rt, "tail"), Error: rapid.String().Draw(rt, "error"),
			Now: drawTime(rt, "now"), RetryAt: drawTime(rt, "retry"), OnlyReserved: rapid.Bool().Draw(rt, "only-reserved"), InputUnavailable: rapid.Bool().Draw(rt, "input-unavailable"),
		}
		checkBinary(rt, EncodeAttemptEnd(r), MsgAttemptEnd, decodeAttemptEnd, r)
	})
}

// TestBinaryMapsHaveOneEncoding: a map's keys out of order, or repeated,
// are refused rather than read into a map that would encode differently.
func TestBinaryMapsHaveOneEncoding(t *testing.T) {
	for name, pairs := range map[string][]string{"out of order": {"b", "1", "a", "2"}, "repeated": {"a", "1", "a", "2"}} {
		d := decoder{}
		buf := binary.AppendUvarint(nil, uint64(len(pairs)/2))
		for _, s := range pairs {
			buf = appendString(buf, s)
		}
		d.buf = buf
		if m := d.stringMap(); d.err == nil {
			t.Errorf("%s keys read as %v", name, m)
		}
	}
	d := decoder{buf: binary.AppendUvarint(nil, 1<<40)}
	if d.stringMap(); d.err == nil {
		t.Error("a map count larger than its payload was accepted")
	}
}

func drawTiers(rt *rapid.T) []scheduler.Tier {
	n := rapid.IntRange(0, 3).Draw(rt, "tiers")
	if n == 0 {
		return nil
	}
	out := make([]scheduler.Tier, n)
	for i := range out {
		out[i] = scheduler.Tier(rapid.IntRange(1, 3).Draw(rt, "tier"))
	}
	return out
}

func drawNames(rt *rapid.T, label string) []string {
	n := rapid.IntRange(0, 3).Draw(rt, label)
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = rapid.String().Draw(rt, label+"-name")
	}
	return out
}

// An attempt end's flags are one byte each, 0 or 1: any other value is
// refused rather than read as true.
func TestAttemptEndFlagsAreZeroOrOne(t *testing.T) {
	r := AttemptEndRequest{AttemptID: "a1", LeaseVersion: 7, State: AttemptLost, ExitCode: -1, Error: "reclaimed", Now: epoch, RetryAt: epoch, OnlyReserved: true, InputUnavailable: true}
	enc := EncodeAttemptEnd(r)
	if got, err := decodeAttemptEnd(enc[2:]); err != nil || !reflect.DeepEqual(*got, r) {
		t.Fatalf("decoded as %+v (%v), want %+v", got, err, r)
	}
	bad := bytes.Clone(enc)
	bad[len(bad)-1] = 2
	if _, err := decodeAttemptEnd(bad[2:]); !errors.Is(err, ErrMalformedCommand) {
		t.Fatalf("a flag of 2 decoded: %v", err)
	}
}
