package fsm

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Stamp is a moment as nanoseconds since the Unix epoch, UTC; the zero
// Stamp stands for the zero time. Records keep their times as Stamps:
// 8 bytes against time.Time's 24, and a replica holds several per task
// (a pending task's record went from 384 to 320 bytes). JSON reads and
// writes a Stamp exactly as time.Time does, so snapshots keep their form.
//
// A Stamp spans the years 1678 to 2262; the epoch itself reads as the
// zero time (no clock of a running cluster says 1970).
type Stamp int64

// StampOf converts t; times outside a Stamp's span saturate at its ends.
func StampOf(t time.Time) Stamp {
	if t.IsZero() {
		return 0
	}
	switch {
	case t.Before(minStampTime):
		return math.MinInt64
	case t.After(maxStampTime):
		return math.MaxInt64
	}
	return Stamp(t.UnixNano())
}

var (
	minStampTime = time.Unix(0, math.MinInt64)
	maxStampTime = time.Unix(0, math.MaxInt64)
)

// Time returns the moment in UTC, or the zero time.
func (s Stamp) Time() time.Time {
	if s == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(s)).UTC()
}

// IsZero reports whether s stands for the zero time (json's omitzero
// consults it).
func (s Stamp) IsZero() bool { return s == 0 }

// Before reports whether s is earlier than t.
func (s Stamp) Before(t Stamp) bool { return s < t }

// After reports whether s is later than t.
func (s Stamp) After(t Stamp) bool { return s > t }

// Sub returns s-t.
func (s Stamp) Sub(t Stamp) time.Duration { return time.Duration(s - t) }

// MarshalJSON writes s as time.Time writes the same moment.
func (s Stamp) MarshalJSON() ([]byte, error) { return s.Time().MarshalJSON() }

// UnmarshalJSON reads what time.Time reads, and refuses a time outside a
// Stamp's span instead of changing it.
func (s *Stamp) UnmarshalJSON(b []byte) error {
	var t time.Time
	if err := json.Unmarshal(b, &t); err != nil {
		return err
	}
	if !t.IsZero() && (t.Before(minStampTime) || t.After(maxStampTime)) {
		return fmt.Errorf("time %s is outside the years 1678 to 2262", t.Format(time.RFC3339))
	}
	*s = StampOf(t)
	return nil
}
