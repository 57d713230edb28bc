package fsm

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
)

// Snapshot version 2 follows its JSON header line with frames: a kind
// byte, the payload's length as a uvarint, the payload. A record of a
// table other than tasks and attempts is its table's name (a string of
// the binary form) and its JSON; a task shape is its binary form, as
// commands carry it (appendShape), written once before the first task
// that has it; a task and an attempt are their fields in the binary form,
// the task naming its shape by the order the shapes were written in. An
// end frame, holding how many frames came before it, closes the stream:
// a snapshot cut short at a frame's end is refused, not read as a
// smaller state.
// Tasks and attempts are nearly all of a large state, and restoring them
// from JSON was most of a replica's start.
const (
	frameRecord  = 1
	frameShape   = 2
	frameTask    = 3
	frameAttempt = 4
	frameEnd     = 5
)

// maxPeekedFrame is the largest payload read in place from the reader's
// buffer; a longer one is copied out of it.
const maxPeekedFrame = 128 << 10

// framedSink writes records as version 2 frames.
type framedSink struct {
	bw      *bufio.Writer
	frames  uint64
	buf     []byte
	byShape map[*TaskShape]uint64 // a written shape's number, by record
	byForm  map[string]uint64     // and by binary form: equal shapes held apart share one
}

func newFramedSink(bw *bufio.Writer) *framedSink {
	return &framedSink{bw: bw, byShape: map[*TaskShape]uint64{}, byForm: map[string]uint64{}}
}

func (f *framedSink) frame(kind byte, payload []byte) error {
	f.frames++
	f.bw.WriteByte(kind)
	var n [binary.MaxVarintLen64]byte
	f.bw.Write(n[:binary.PutUvarint(n[:], uint64(len(payload)))])
	_, err := f.bw.Write(payload)
	return err
}

// end writes the end frame.
func (f *framedSink) end() error {
	if err := f.frame(frameEnd, binary.AppendUvarint(f.buf[:0], f.frames)); err != nil {
		return fmt.Errorf("write the end: %w", err)
	}
	return nil
}

func (f *framedSink) record(table string, rec any) error {
	body, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode %s record: %w", table, err)
	}
	f.buf = append(appendString(f.buf[:0], table), body...)
	if err := f.frame(frameRecord, f.buf); err != nil {
		return fmt.Errorf("write %s record: %w", table, err)
	}
	return nil
}

// shape is the number of t's shape, writing the shape first when it is
// new to this snapshot. Shapes are numbered in the order tasks (in id
// order) first have them, by binary form, so equal states give equal
// bytes however their shapes are shared in memory.
func (f *framedSink) shape(sh *TaskShape) (uint64, error) {
	if n, ok := f.byShape[sh]; ok {
		return n, nil
	}
	form := appendShape(nil, sh)
	n, ok := f.byForm[string(form)]
	if !ok {
		n = uint64(len(f.byForm))
		f.byForm[string(form)] = n
		if err := f.frame(frameShape, form); err != nil {
			return 0, fmt.Errorf("write task shape: %w", err)
		}
	}
	f.byShape[sh] = n
	return n, nil
}

func (f *framedSink) task(t *Task) error {
	shape, err := f.shape(t.Spec.TaskShape)
	if err != nil {
		return err
	}
	f.buf = appendTaskForm(f.buf[:0], t, shape)
	if err := f.frame(frameTask, f.buf); err != nil {
		return fmt.Errorf("write task %s: %w", t.ID, err)
	}
	return nil
}

// appendTaskForm appends a task frame's payload: t's fields, its shape
// by number.
func appendTaskForm(b []byte, t *Task, shape uint64) []byte {
	b = appendString(b, t.ID)
	b = appendString(b, t.State.String())
	b = binary.AppendVarint(b, int64(t.Attempts))
	b = binary.AppendVarint(b, int64(t.Failures))
	b = appendString(b, t.Spec.Name)
	b = appendString(b, t.Spec.IdempotencyKey)
	b = binary.AppendUvarint(b, shape)
	b = binary.AppendUvarint(b, t.CreateIndex)
	b = binary.AppendUvarint(b, t.ModifyIndex)
	b = appendString(b, t.CurrentAttempt())
	b = binary.AppendVarint(b, int64(t.QueuedAt))
	b = binary.AppendVarint(b, int64(t.NotBefore()))
	failures := t.nodeFailures()
	b = binary.AppendUvarint(b, uint64(len(failures)))
	for _, node := range slices.Sorted(maps.Keys(failures)) {
		b = appendString(b, node)
		b = binary.AppendVarint(b, int64(failures[node].Count))
		b = binary.AppendUvarint(b, failures[node].LastIndex)
	}
	b = append(b, boolByte(t.currentSlow))
	b = appendString(b, t.LastExplain())
	b = binary.AppendUvarint(b, uint64(t.TimelineLen()))
	if ev, ok := t.first(); ok {
		b = appendEventForm(b, ev)
	}
	for _, ev := range t.later() {
		b = appendEventForm(b, ev)
	}
	return b
}

func appendEventForm(b []byte, ev TimelineEvent) []byte {
	b = binary.AppendUvarint(b, ev.Index)
	b = binary.AppendVarint(b, int64(ev.Time))
	b = appendString(b, ev.Kind.String())
	return appendString(b, ev.Message)
}

func (f *framedSink) attempt(a *Attempt) error {
	b := appendString(f.buf[:0], a.ID)
	b = appendString(b, a.TaskID)
	b = binary.AppendVarint(b, int64(a.Number))
	b = appendString(b, a.NodeID)
	b = appendString(b, string(a.State))
	b = binary.AppendUvarint(b, a.LeaseVersion)
	b = appendResources(b, a.Resources)
	b = binary.AppendVarint(b, int64(a.ReservedAt))
	b = binary.AppendVarint(b, int64(a.StartedAt))
	b = binary.AppendVarint(b, int64(a.FinishedAt))
	b = binary.AppendVarint(b, int64(a.ExitCode))
	b = appendString(b, a.OutputTail)
	b = appendString(b, a.Error)
	b = binary.AppendUvarint(b, a.CreateIndex)
	b = binary.AppendUvarint(b, a.ModifyIndex)
	f.buf = b
	if err := f.frame(frameAttempt, b); err != nil {
		return fmt.Errorf("write attempt %s: %w", a.ID, err)
	}
	return nil
}

// framedReader reads version 2's frames into a store.
type framedReader struct {
	r      *bufio.Reader
	db     *store
	long   []byte
	shapes []*TaskShape
	// words holds one copy of each value a repeating field took (attempt
	// states, node ids of attempts), so a restored state does not hold a
	// copy of "SUCCEEDED" per record; kinds the event kinds read so far.
	words map[string]string
	kinds map[string]EventKind
}

// readFramed reads frames from r until its end and puts their records
// into db.
func readFramed(r *bufio.Reader, db *store) error {
	fr := framedReader{r: r, db: db, words: map[string]string{}, kinds: map[string]EventKind{}}
	for n := uint64(0); ; n++ {
		kind, err := r.ReadByte()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("the snapshot ends after %d frames without its end frame: it was cut short", n)
		}
		if err == nil {
			if kind == frameEnd {
				return fr.end(n)
			}
			err = fr.frame(kind)
		}
		if err != nil {
			return fmt.Errorf("record %d: %w", n, err)
		}
	}
}

// end reads the end frame, after n frames: it must count them, and
// nothing may follow it.
func (fr *framedReader) end(n uint64) error {
	size, err := binary.ReadUvarint(fr.r)
	if err != nil {
		return fmt.Errorf("end frame: %w", noEOF(err))
	}
	payload := make([]byte, min(size, binary.MaxVarintLen64+1))
	if _, err := io.ReadFull(fr.r, payload); err != nil {
		return fmt.Errorf("end frame: %w", noEOF(err))
	}
	d := decoder{buf: payload}
	if count := d.uvarint(); d.finish() != nil || count != n {
		return fmt.Errorf("the end frame does not count the %d frames before it", n)
	}
	if _, err := fr.r.ReadByte(); !errors.Is(err, io.EOF) {
		return errors.New("data after the snapshot's end frame")
	}
	return nil
}

// frame reads one frame's length and payload and decodes it.
func (fr *framedReader) frame(kind byte) error {
	size, err := binary.ReadUvarint(fr.r)
	if err != nil {
		return fmt.Errorf("frame length: %w", noEOF(err))
	}
	var payload []byte
	if size <= maxPeekedFrame {
		if payload, err = fr.r.Peek(int(size)); err != nil {
			return fmt.Errorf("frame of %d bytes: %w", size, noEOF(err))
		}
		defer fr.r.Discard(int(size))
	} else {
		// Read in steps, so a corrupt length fails at the stream's end
		// instead of allocating what it claims.
		fr.long = fr.long[:0]
		for left := size; left > 0; {
			step := min(left, maxPeekedFrame)
			start := len(fr.long)
			fr.long = append(fr.long, make([]byte, step)...)
			if _, err := io.ReadFull(fr.r, fr.long[start:]); err != nil {
				return fmt.Errorf("frame of %d bytes: %w", size, noEOF(err))
			}
			left -= step
		}
		payload = fr.long
	}
	switch kind {
	case frameRecord:
		d := decoder{buf: payload}
		table := d.string()
		if d.err != nil {
			return fmt.Errorf("record's table: %w", d.err)
		}
		if table == tableTasks || table == tableAttempts {
			return fmt.Errorf("%s record in JSON: version 2 frames them in the binary form", table)
		}
		return decodeRecord(fr.db, snapshotRecord{Table: table, Record: d.buf})
	case frameShape:
		d := decoder{buf: payload}
		sh := d.shape()
		if err := d.finish(); err != nil {
			return fmt.Errorf("task shape %d: %w", len(fr.shapes), err)
		}
		// The payload is the shape's binary form, its key in the interner.
		fr.shapes = append(fr.shapes, fr.db.w.interner.shape(sh, payload))
		return nil
	case frameTask:
		return fr.task(payload)
	case frameAttempt:
		return fr.attempt(payload)
	default:
		return fmt.Errorf("unknown frame kind %d", kind)
	}
}

// noEOF turns an end of stream inside a frame into ErrUnexpectedEOF.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// word reads a string of a repeating field, shared with earlier equal
// ones.
func (fr *framedReader) word(d *decoder) string {
	n := d.uvarint()
	if n > uint64(len(d.buf)) {
		d.fail("string")
		return ""
	}
	b := d.buf[:n]
	d.buf = d.buf[n:]
	if s, ok := fr.words[string(b)]; ok {
		return s
	}
	s := string(b)
	fr.words[s] = s
	return s
}

// taskState reads a task state by its name.
func taskState(d *decoder) TaskState {
	name := d.raw()
	s, ok := ParseTaskState(string(name))
	if !ok && d.err == nil {
		d.fail("task state")
	}
	return s
}

// kind reads an event kind by its name.
func (fr *framedReader) kind(d *decoder) EventKind {
	name := d.raw()
	if k, ok := fr.kinds[string(name)]; ok || d.err != nil {
		return k
	}
	var k EventKind
	if err := k.UnmarshalText(name); err != nil {
		d.fail("event kind")
		return 0
	}
	fr.kinds[string(name)] = k
	return k
}

// small reads an int16 count.
func small(d *decoder) int16 {
	v := d.varint()
	if v < math.MinInt16 || v > math.MaxInt16 {
		d.fail("count")
		return 0
	}
	return int16(v)
}

func (fr *framedReader) task(payload []byte) error {
	d := decoder{buf: payload}
	j := taskJSON{ID: d.string(), State: taskState(&d), Attempts: small(&d), Failures: small(&d)}
	j.Spec.Name, j.Spec.IdempotencyKey = d.string(), d.string()
	shape := d.uvarint()
	j.CreateIndex, j.ModifyIndex = d.uvarint(), d.uvarint()
	j.CurrentAttempt = d.string()
	j.QueuedAt, j.NotBefore = Stamp(d.varint()), Stamp(d.varint())
	if n := d.count(3); n > 0 {
		j.NodeFailures = make(map[string]NodeFailure, n)
		prev := ""
		for i := 0; i < n && d.err == nil; i++ {
			node := d.string()
			if i > 0 && node <= prev {
				d.fail("node failures' order")
				break
			}
			j.NodeFailures[node], prev = NodeFailure{Count: int(d.varint()), LastIndex: d.uvarint()}, node
		}
	}
	j.CurrentSlow = d.bool()
	j.LastExplain = d.string()
	if n := d.count(4); n > 0 {
		j.Timeline = make([]TimelineEvent, n)
		for i := range j.Timeline {
			j.Timeline[i] = TimelineEvent{Index: d.uvarint(), Time: Stamp(d.varint()), Kind: fr.kind(&d), Message: d.string()}
		}
	}
	if err := d.finish(); err != nil {
		return fmt.Errorf("task %q: %w", j.ID, err)
	}
	if j.ID == "" {
		return errors.New("tasks record without id")
	}
	if shape >= uint64(len(fr.shapes)) {
		return fmt.Errorf("task %q has shape %d, and %d were written before it", j.ID, shape, len(fr.shapes))
	}
	j.Spec.TaskShape = fr.shapes[shape]
	t := new(Task)
	if err := t.fromJSON(&j); err != nil {
		return fmt.Errorf("decode tasks record: %w", err)
	}
	fr.db.w.interner.task(t, nil, true)
	fr.db.putTask(t)
	return nil
}

func (fr *framedReader) attempt(payload []byte) error {
	d := decoder{buf: payload}
	a := &Attempt{ID: d.string(), TaskID: d.string(), Number: int(d.varint()), NodeID: fr.word(&d), State: AttemptState(fr.word(&d)),
		LeaseVersion: d.uvarint(), Resources: d.resources(), ReservedAt: Stamp(d.varint()), StartedAt: Stamp(d.varint()),
		FinishedAt: Stamp(d.varint()), ExitCode: int(d.varint()), OutputTail: d.string(), Error: d.string(),
		CreateIndex: d.uvarint(), ModifyIndex: d.uvarint()}
	if err := d.finish(); err != nil {
		return fmt.Errorf("attempt %q: %w", a.ID, err)
	}
	if a.ID == "" {
		return errors.New("attempts record without id")
	}
	fr.db.putAttempt(a)
	return nil
}
