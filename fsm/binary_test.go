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
		checkBinary(rt, EncodeReserve(r), MsgReserve, func(p []byte) (*ReserveRequest, error) { return decodeReserveVersion(p, binaryVersion) }, r)
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
	if err != nil || h.typ != want || !h.binary {
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
			Submitter: rapid.String().Draw(rt, "submitter"), OnDisconnect: rapid.SampledFrom([]string{"", OnDisconnectKeepRunning, "x"}).Draw(rt, "ondisconnect"),
			Class: rapid.String().Draw(rt, "class"), Size: rapid.SampledFrom([]string{"", "small", "large"}).Draw(rt, "size"),
			Tiers: drawTiers(rt), Inputs: drawNames(rt, "inputs"), Outputs: drawNames(rt, "outputs"), InputPaths: drawNames(rt, "paths"),
			Driver: rapid.SampledFrom([]string{"", DriverOCI}).Draw(rt, "driver"), Image: rapid.String().Draw(rt, "image"),
			Network: rapid.SampledFrom([]string{"", NetworkNone}).Draw(rt, "network"), Speculative: rapid.Bool().Draw(rt, "speculative"),
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

// TestBinaryAndJSONCommandsApplyAlike: a task's whole life (submission,
// explanation, reservation, start, end) in either encoding leaves replicas in the same
// state, so entries older versions wrote in JSON replay as they did.
func TestBinaryAndJSONCommandsApplyAlike(t *testing.T) {
	now := epoch.Add(1234567891 * time.Nanosecond)
	hashes := map[string]string{}
	for name, encode := range map[string]func(MessageType, any) []byte{
		"json": func(mt MessageType, v any) []byte {
			b, err := EncodeJSON(mt, v)
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		"binary": func(mt MessageType, v any) []byte {
			b := mustEncode(t, mt, v)
			if h, _, err := decodeHeader(b); err != nil || !h.binary {
				t.Fatalf("%s encoded as %+v (%v), want the binary form", mt, h, err)
			}
			return b
		},
	} {
		h := newHarness(t)
		n := h.register("n1", scheduler.Resources{CPUMillis: 4000, MemoryMB: 4096}, 4)
		spec := testSpec("key")
		spec.RequiredLabels, spec.Resources = map[string]string{}, scheduler.Resources{CPUMillis: 100, MemoryMB: 64}
		res := h.applyBatch(
			encode(MsgSubmitTask, SubmitTaskRequest{ID: "t1", SubmittedAt: now, Spec: spec}),
			encode(MsgExplain, ExplainRequest{TaskID: "t1", Summary: "no node has 100 CPU millis free", Now: now}),
			encode(MsgReserve, ReserveRequest{TaskID: "t1", AttemptID: "a1", Number: 1, NodeID: "n1", SessionGeneration: n.SessionGeneration, Score: 7, Now: now, HeartbeatTTL: time.Minute}))
		if err, isErr := res[1].(error); isErr {
			t.Fatalf("%s explanation: %v", name, err)
		}
		r, ok := res[2].(*ReserveResult)
		if !ok {
			t.Fatalf("%s reservation: %v", name, res[2])
		}
		lease := r.Attempt.LeaseVersion
		res = h.applyBatch(
			encode(MsgAttemptStart, AttemptStartRequest{AttemptID: "a1", LeaseVersion: lease, Now: now.Add(time.Second)}),
			encode(MsgAttemptEnd, AttemptEndRequest{AttemptID: "a1", LeaseVersion: lease, State: AttemptFailed, ExitCode: 3,
				OutputTail: "boom", Error: "exit status 3", Now: now.Add(2 * time.Second), RetryAt: now.Add(time.Minute)}))
		for i, r := range res {
			if _, ok := r.(*AttemptResult); !ok {
				t.Fatalf("%s report %d: %v", name, i, r)
			}
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

// Submissions in the binary forms of version 2 (before on_disconnect),
// 3 (before class, size, tiers, inputs and outputs), 4 (before driver,
// image and network), 5 and 6 (before speculative) are still read, and
// applied as today's without the fields they lack.
func TestSubmitOlderBinaryVersionsAreRead(t *testing.T) {
	r := SubmitTaskRequest{ID: "t1", SubmittedAt: epoch, Spec: testSpec("k")}
	v4 := EncodeSubmitTask(r)
	if !bytes.Equal(v4[len(v4)-11:], make([]byte, 11)) {
		t.Fatalf("today's form does not end with eleven empty fields: %x", v4[len(v4)-12:])
	}
	for _, c := range []struct {
		version byte
		cut     int
	}{{2, 11}, {3, 10}, {4, 4}, {5, 1}, {6, 1}} {
		old := append([]byte{v4[0], c.version}, v4[2:len(v4)-c.cut]...)
		f := New(nil)
		res, ok := f.ApplyBytes(1, old).(*SubmitResult)
		if !ok {
			t.Fatalf("a version %d submission: %#v", c.version, f.ApplyBytes(1, old))
		}
		task, err := f.State().Task(res.Task.ID)
		if err != nil || task.Spec.OnDisconnect != "" || task.Spec.Class != "" || task.Spec.Submitter != r.Spec.Submitter || !reflect.DeepEqual(task.Spec.Command, r.Spec.Command) {
			t.Fatalf("version %d decoded as %+v (%v)", c.version, task, err)
		}
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

// An attempt end in the binary form of version 5 (before OnlyReserved)
// is read as an unconditional one, one of version 6 (before
// InputUnavailable) as a plain end, and a flag other than 0 or 1 is
// refused.
func TestAttemptEndOlderBinaryVersionIsRead(t *testing.T) {
	r := AttemptEndRequest{AttemptID: "a1", LeaseVersion: 7, State: AttemptLost, ExitCode: -1, Error: "reclaimed", Now: epoch, RetryAt: epoch, OnlyReserved: true, InputUnavailable: true}
	enc := EncodeAttemptEnd(r)
	if enc[len(enc)-2] != 1 || enc[len(enc)-1] != 1 {
		t.Fatalf("today's form does not end with the flags: %x", enc[len(enc)-2:])
	}
	for _, c := range []struct {
		version byte
		cut     int
		clear   func(*AttemptEndRequest)
	}{
		{5, 2, func(r *AttemptEndRequest) { r.OnlyReserved, r.InputUnavailable = false, false }},
		{6, 1, func(r *AttemptEndRequest) { r.InputUnavailable = false }},
	} {
		old := append([]byte{enc[0], c.version}, enc[2:len(enc)-c.cut]...)
		h, payload, err := decodeHeader(old)
		if err != nil || !h.binary {
			t.Fatalf("a version %d end: %+v, %v", c.version, h, err)
		}
		got, err := decodeAttemptEndVersion(payload, h.version)
		want := r
		c.clear(&want)
		if err != nil || !reflect.DeepEqual(*got, want) {
			t.Fatalf("a version %d end decoded as %+v (%v), want %+v", c.version, got, err, want)
		}
	}
	bad := bytes.Clone(enc)
	bad[len(bad)-1] = 2
	if _, err := decodeAttemptEnd(bad[2:]); !errors.Is(err, ErrMalformedCommand) {
		t.Fatalf("a flag of 2 decoded: %v", err)
	}
}
