package fsm

import (
	"encoding/binary"
	"fmt"
	"time"
)

// binaryVersion is the payload version of commands encoded in herd's
// compact binary form instead of JSON. Only reservations use it: the
// leader writes hundreds of them per entry, and decoding their JSON was
// a sixth of every replica's CPU at full placement rate. A replica that
// predates it refuses such entries (the version byte), so a cluster must
// run one herd version before the leader writes them.
const binaryVersion = 2

// EncodeReserve encodes a reservation in the binary payload form: the
// fields in declaration order, strings and integers as (u)varints, and
// times as a presence byte, then seconds and nanoseconds since the Unix
// epoch (read back in UTC).
func EncodeReserve(r ReserveRequest) []byte {
	buf := make([]byte, 0, 2+3*(1+32)+6*binary.MaxVarintLen64)
	buf = append(buf, byte(MsgReserve), binaryVersion)
	buf = appendString(buf, r.TaskID)
	buf = appendString(buf, r.AttemptID)
	buf = binary.AppendVarint(buf, int64(r.Number))
	buf = appendString(buf, r.NodeID)
	buf = binary.AppendUvarint(buf, r.SessionGeneration)
	buf = binary.AppendVarint(buf, r.Score)
	buf = appendTime(buf, r.Now)
	buf = binary.AppendVarint(buf, int64(r.HeartbeatTTL))
	return buf
}

func decodeReserve(payload []byte) (*ReserveRequest, error) {
	d := decoder{buf: payload}
	r := &ReserveRequest{
		TaskID: d.string(), AttemptID: d.string(), Number: int(d.varint()), NodeID: d.string(),
		SessionGeneration: d.uvarint(), Score: d.varint(), Now: d.time(), HeartbeatTTL: time.Duration(d.varint()),
	}
	if err := d.finish(); err != nil {
		return nil, fmt.Errorf("%w: reserve: %v", ErrMalformedCommand, err)
	}
	return r, nil
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
