package fsm

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"time"

	"herd/scheduler"
)

// The binary form is the one form of the commands every task goes
// through (submission, explanation of a wait, reservation, attempt start
// and end): the leader writes hundreds of them per entry, every replica
// decodes every one, and the binary form decodes several times faster
// than JSON and takes about a third of its bytes in the log. Each
// payload is the request's fields in declaration order; its version byte
// is CommandForms.

// EncodeReserve encodes a reservation in the binary payload form: the
// fields in declaration order, strings and integers as (u)varints, and
// times as a presence byte, then seconds and nanoseconds since the Unix
// epoch (read back in UTC).
func EncodeReserve(r ReserveRequest) []byte {
	buf := make([]byte, 0, 2+3*(1+32)+6*binary.MaxVarintLen64)
	buf = append(buf, byte(MsgReserve), baseForms)
	buf = appendString(buf, r.TaskID)
	buf = appendString(buf, r.AttemptID)
	buf = binary.AppendVarint(buf, int64(r.Number))
	buf = appendString(buf, r.NodeID)
	buf = binary.AppendUvarint(buf, r.SessionGeneration)
	buf = binary.AppendVarint(buf, r.Score)
	buf = appendTime(buf, r.Now)
	buf = binary.AppendVarint(buf, int64(r.HeartbeatTTL))
	return append(buf, boolByte(r.Backup))
}

// decodeReserve decodes a reservation written in the binary form.
func decodeReserve(payload []byte) (*ReserveRequest, error) {
	d := decoder{buf: payload}
	r := &ReserveRequest{
		TaskID: d.string(), AttemptID: d.string(), Number: int(d.varint()), NodeID: d.string(),
		SessionGeneration: d.uvarint(), Score: d.varint(), Now: d.time(), HeartbeatTTL: time.Duration(d.varint()),
		Backup: d.bool(),
	}
	if err := d.finish(); err != nil {
		return nil, fmt.Errorf("%w: reserve: %v", ErrMalformedCommand, err)
	}
	return r, nil
}

// EncodeSubmitTask encodes a submission in the binary form: the request's
// fields, the spec's name and idempotency key, then its shape (see
// appendShape), which ends the payload.
func EncodeSubmitTask(r SubmitTaskRequest) []byte {
	buf := make([]byte, 0, 256) // a typical spec's size; append grows it for larger ones
	buf = append(buf, byte(MsgSubmitTask), baseForms)
	buf = appendString(buf, r.ID)
	buf = appendTime(buf, r.SubmittedAt)
	buf = appendString(buf, r.Spec.Name)
	buf = appendString(buf, r.Spec.IdempotencyKey)
	return appendShape(buf, r.Spec.TaskShape)
}

// appendTiers appends tiers as a string of one byte each.
func appendTiers(buf []byte, ts []scheduler.Tier) []byte {
	tiers := make([]byte, len(ts))
	for i, t := range ts {
		tiers[i] = byte(t)
	}
	return appendString(buf, string(tiers))
}

func decodeSubmitTask(payload []byte) (*SubmitTaskRequest, error) {
	return decodeSubmitTaskWith(payload, nil)
}

// decodeSubmitTaskWith decodes a submission. A shape the interner already
// holds is not decoded again: its encoding is its key, and equal
// encodings decode to equal shapes.
func decodeSubmitTaskWith(payload []byte, in *interner) (*SubmitTaskRequest, error) {
	d := decoder{buf: payload}
	r := &SubmitTaskRequest{ID: d.string(), SubmittedAt: d.time()}
	r.Spec.Name, r.Spec.IdempotencyKey = d.string(), d.string()
	if d.err == nil {
		r.shapeKey = d.buf
		if sh := in.known(d.buf); sh != nil {
			r.Spec.TaskShape, r.shapeShared = sh, true
			return r, nil
		}
	}
	r.Spec.TaskShape = d.shape()
	if err := d.finish(); err != nil {
		return nil, fmt.Errorf("%w: submit: %v", ErrMalformedCommand, err)
	}
	return r, nil
}

// EncodeAttemptStart encodes an attempt's start in the binary form.
func EncodeAttemptStart(r AttemptStartRequest) []byte {
	buf := make([]byte, 0, 2+3*binary.MaxVarintLen64+1+len(r.AttemptID))
	buf = append(buf, byte(MsgAttemptStart), baseForms)
	buf = appendString(buf, r.AttemptID)
	buf = binary.AppendUvarint(buf, r.LeaseVersion)
	return appendTime(buf, r.Now)
}

func decodeAttemptStart(payload []byte) (*AttemptStartRequest, error) {
	d := decoder{buf: payload}
	r := &AttemptStartRequest{AttemptID: d.string(), LeaseVersion: d.uvarint(), Now: d.time()}
	if err := d.finish(); err != nil {
		return nil, fmt.Errorf("%w: attempt start: %v", ErrMalformedCommand, err)
	}
	return r, nil
}

// EncodeAttemptEnd encodes an attempt's end in the binary form.
func EncodeAttemptEnd(r AttemptEndRequest) []byte {
	buf := make([]byte, 0, 3+10*binary.MaxVarintLen64+len(r.AttemptID)+len(r.State)+len(r.OutputTail)+len(r.Error))
	buf = append(buf, byte(MsgAttemptEnd), baseForms)
	buf = appendString(buf, r.AttemptID)
	buf = binary.AppendUvarint(buf, r.LeaseVersion)
	buf = appendString(buf, string(r.State))
	buf = binary.AppendVarint(buf, int64(r.ExitCode))
	buf = appendString(buf, r.OutputTail)
	buf = appendString(buf, r.Error)
	buf = appendTime(buf, r.Now)
	buf = appendTime(buf, r.RetryAt)
	buf = append(buf, boolByte(r.OnlyReserved))
	return append(buf, boolByte(r.InputUnavailable))
}

// decodeAttemptEnd decodes an attempt's end written in the binary form.
func decodeAttemptEnd(payload []byte) (*AttemptEndRequest, error) {
	d := decoder{buf: payload}
	r := &AttemptEndRequest{
		AttemptID: d.string(), LeaseVersion: d.uvarint(), State: AttemptState(d.string()), ExitCode: int(d.varint()),
		OutputTail: d.string(), Error: d.string(), Now: d.time(), RetryAt: d.time(),
		OnlyReserved: d.bool(), InputUnavailable: d.bool(),
	}
	if err := d.finish(); err != nil {
		return nil, fmt.Errorf("%w: attempt end: %v", ErrMalformedCommand, err)
	}
	return r, nil
}

// EncodeAttemptRun encodes an attempt's start and end in one command
// (forms 2): the end's form, then the start's time.
func EncodeAttemptRun(r AttemptRunRequest) []byte {
	end := EncodeAttemptEnd(r.End)
	end[0], end[1] = byte(MsgAttemptRun), FormsAttemptRun
	return appendTime(end, r.StartedAt)
}

func decodeAttemptRun(payload []byte) (*AttemptRunRequest, error) {
	d := decoder{buf: payload}
	r := &AttemptRunRequest{End: AttemptEndRequest{
		AttemptID: d.string(), LeaseVersion: d.uvarint(), State: AttemptState(d.string()), ExitCode: int(d.varint()),
		OutputTail: d.string(), Error: d.string(), Now: d.time(), RetryAt: d.time(),
		OnlyReserved: d.bool(), InputUnavailable: d.bool(),
	}, StartedAt: d.time()}
	if err := d.finish(); err != nil {
		return nil, fmt.Errorf("%w: attempt run: %v", ErrMalformedCommand, err)
	}
	return r, nil
}

// EncodeExplain encodes why a pending task waits in the binary form: the
// leader writes one for every waiting task whose reason changed, so a
// backlog writes as many of them as submissions.
func EncodeExplain(r ExplainRequest) []byte {
	buf := make([]byte, 0, 2+4*binary.MaxVarintLen64+1+len(r.TaskID)+len(r.Summary))
	buf = append(buf, byte(MsgExplain), baseForms)
	buf = appendString(buf, r.TaskID)
	buf = appendString(buf, r.Summary)
	return appendTime(buf, r.Now)
}

func decodeExplain(payload []byte) (*ExplainRequest, error) {
	d := decoder{buf: payload}
	r := &ExplainRequest{TaskID: d.string(), Summary: d.string(), Now: d.time()}
	if err := d.finish(); err != nil {
		return nil, fmt.Errorf("%w: explain: %v", ErrMalformedCommand, err)
	}
	return r, nil
}

// EncodeSubmitMany encodes several submissions (forms 3): the time, the
// distinct shapes' binary forms, then each task's id, name, idempotency
// key and the number of its shape. A batch of one kind of task writes
// its shape once instead of once per task.
func EncodeSubmitMany(r SubmitManyRequest) []byte {
	var shapes [][]byte
	byForm := map[string]uint64{}
	refs := make([]uint64, len(r.Tasks))
	size := 2 + 3*binary.MaxVarintLen64 + 1
	for i, t := range r.Tasks {
		form := appendShape(nil, t.Spec.TaskShape)
		k, ok := byForm[string(form)]
		if !ok {
			k = uint64(len(shapes))
			byForm[string(form)] = k
			shapes = append(shapes, form)
			size += binary.MaxVarintLen64 + len(form)
		}
		refs[i] = k
		size += 4*binary.MaxVarintLen64 + len(t.ID) + len(t.Spec.Name) + len(t.Spec.IdempotencyKey)
	}
	buf := make([]byte, 0, size)
	buf = append(buf, byte(MsgSubmitMany), FormsSubmitMany)
	buf = appendTime(buf, r.SubmittedAt)
	buf = binary.AppendUvarint(buf, uint64(len(shapes)))
	for _, form := range shapes {
		buf = binary.AppendUvarint(buf, uint64(len(form)))
		buf = append(buf, form...)
	}
	buf = binary.AppendUvarint(buf, uint64(len(r.Tasks)))
	for i, t := range r.Tasks {
		buf = appendString(buf, t.ID)
		buf = appendString(buf, t.Spec.Name)
		buf = appendString(buf, t.Spec.IdempotencyKey)
		buf = binary.AppendUvarint(buf, refs[i])
	}
	return buf
}

func decodeSubmitMany(payload []byte) (*SubmitManyRequest, error) {
	return decodeSubmitManyWith(payload, nil)
}

// decodeSubmitManyWith decodes several submissions; each shape is decoded
// once, and not at all when the interner already holds it (as a single
// submission's is).
func decodeSubmitManyWith(payload []byte, in *interner) (*SubmitManyRequest, error) {
	d := decoder{buf: payload}
	r := &SubmitManyRequest{SubmittedAt: d.time()}
	type shapeOf struct {
		key    []byte
		shape  *TaskShape
		shared bool
	}
	shapes := make([]shapeOf, d.count(2))
	for i := range shapes {
		key := d.raw()
		if d.err != nil {
			break
		}
		if sh := in.known(key); sh != nil {
			shapes[i] = shapeOf{key: key, shape: sh, shared: true}
			continue
		}
		sd := decoder{buf: key}
		sh := sd.shape()
		if err := sd.finish(); err != nil {
			d.fail("shape")
			break
		}
		shapes[i] = shapeOf{key: key, shape: sh}
	}
	r.Tasks = make([]SubmitTaskRequest, d.count(4))
	for i := range r.Tasks {
		t := &r.Tasks[i]
		t.ID, t.Spec.Name, t.Spec.IdempotencyKey = d.string(), d.string(), d.string()
		k := d.uvarint()
		if d.err == nil && k >= uint64(len(shapes)) {
			d.fail("shape number")
		}
		if d.err != nil {
			break
		}
		t.SubmittedAt = r.SubmittedAt
		t.Spec.TaskShape, t.shapeKey, t.shapeShared = shapes[k].shape, shapes[k].key, shapes[k].shared
	}
	if err := d.finish(); err != nil {
		return nil, fmt.Errorf("%w: submit many: %v", ErrMalformedCommand, err)
	}
	return r, nil
}

// EncodeExplainMany encodes why several pending tasks wait, for one
// reason (forms 3): the summary and the time once, then the tasks.
func EncodeExplainMany(r ExplainManyRequest) []byte {
	size := 2 + 3*binary.MaxVarintLen64 + 1 + len(r.Summary)
	for _, id := range r.TaskIDs {
		size += 1 + len(id)
	}
	buf := make([]byte, 0, size)
	buf = append(buf, byte(MsgExplainMany), FormsExplainMany)
	buf = appendString(buf, r.Summary)
	buf = appendTime(buf, r.Now)
	return appendStrings(buf, r.TaskIDs)
}

func decodeExplainMany(payload []byte) (*ExplainManyRequest, error) {
	d := decoder{buf: payload}
	r := &ExplainManyRequest{Summary: d.string(), Now: d.time(), TaskIDs: d.strings()}
	if err := d.finish(); err != nil {
		return nil, fmt.Errorf("%w: explain many: %v", ErrMalformedCommand, err)
	}
	return r, nil
}

func appendStrings(buf []byte, ss []string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(ss)))
	for _, s := range ss {
		buf = appendString(buf, s)
	}
	return buf
}

func appendMap(buf []byte, m map[string]string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(m)))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		buf = appendString(buf, k)
		buf = appendString(buf, m[k])
	}
	return buf
}

func appendResources(buf []byte, r scheduler.Resources) []byte {
	buf = binary.AppendVarint(buf, r.CPUMillis)
	buf = binary.AppendVarint(buf, r.MemoryMB)
	buf = binary.AppendVarint(buf, r.GPU)
	return binary.AppendVarint(buf, r.DiskMB)
}

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

func appendTime(buf []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(buf, 0)
	}
	buf = append(buf, 1)
	buf = binary.AppendVarint(buf, t.Unix())
	return binary.AppendVarint(buf, int64(t.Nanosecond()))
}

// decoder reads the binary form, remembering the first error so a caller
// can read every field and check once.
type decoder struct {
	buf []byte
	err error
}

// raw reads a length-prefixed run of bytes, without copying it.
func (d *decoder) raw() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.buf)) {
		d.fail("bytes")
		return nil
	}
	b := d.buf[:n:n]
	d.buf = d.buf[n:]
	return b
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("truncated or invalid %s at %d bytes from the end", what, len(d.buf))
	}
	d.buf = nil
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail("unsigned integer")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail("integer")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// bool reads a flag written by boolByte: a byte 0 or 1, any other
// refused so that a flag has one encoding.
func (d *decoder) bool() bool {
	switch v := d.uvarint(); {
	case d.err != nil:
		return false
	case v > 1:
		d.fail("flag")
		return false
	default:
		return v == 1
	}
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func (d *decoder) string() string {
	n := d.uvarint()
	if n > uint64(len(d.buf)) {
		d.fail("string")
		return ""
	}
	s := string(d.buf[:n])
	d.buf = d.buf[n:]
	return s
}

// count reads a length of items that take at least minBytes each: a
// count the rest of the payload cannot hold is refused before anything
// is allocated for it.
// tiers decodes what appendTiers wrote (nil for none).
func (d *decoder) tiers() []scheduler.Tier {
	s := d.string()
	if s == "" {
		return nil
	}
	out := make([]scheduler.Tier, len(s))
	for i := range len(s) {
		out[i] = scheduler.Tier(s[i])
	}
	return out
}

func (d *decoder) count(minBytes int) int {
	n := d.uvarint()
	if n > uint64(len(d.buf)/minBytes) {
		d.fail("count")
		return 0
	}
	return int(n)
}

// strings reads a list of strings; an empty one reads as nil, as JSON's
// omitted fields do.
func (d *decoder) strings() []string {
	n := d.count(1)
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = d.string()
	}
	return out
}

// stringMap reads a map written in key order. Keys out of order or
// repeated are refused: every map has exactly one encoding. An empty map
// reads as nil, as JSON's omitted fields do.
func (d *decoder) stringMap() map[string]string {
	n := d.count(2)
	if n == 0 {
		return nil
	}
	out := make(map[string]string, n)
	prev := ""
	for i := 0; i < n && d.err == nil; i++ {
		k := d.string()
		if i > 0 && k <= prev {
			d.fail("map key order")
			return nil
		}
		out[k], prev = d.string(), k
	}
	return out
}

func (d *decoder) resources() scheduler.Resources {
	return scheduler.Resources{CPUMillis: d.varint(), MemoryMB: d.varint(), GPU: d.varint(), DiskMB: d.varint()}
}

func (d *decoder) time() time.Time {
	if len(d.buf) == 0 {
		d.fail("time")
		return time.Time{}
	}
	set := d.buf[0]
	d.buf = d.buf[1:]
	switch set {
	case 0:
		return time.Time{}
	case 1:
	default:
		d.fail("time")
		return time.Time{}
	}
	sec, nsec := d.varint(), d.varint()
	if nsec < 0 || nsec >= 1e9 {
		d.fail("time")
		return time.Time{}
	}
	return time.Unix(sec, nsec).UTC()
}

func (d *decoder) finish() error {
	if d.err == nil && len(d.buf) != 0 {
		return fmt.Errorf("%d trailing bytes", len(d.buf))
	}
	return d.err
}
