package fsm

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// A Stamp's JSON is time.Time's, so snapshots written before records kept
// Stamps restore, and the snapshot bytes do not change.
func TestStampJSONIsTimeJSON(t *testing.T) {
	for _, tm := range []time.Time{
		{},
		time.Date(2026, 11, 30, 15, 4, 5, 123456789, time.UTC),
		time.Date(2026, 11, 30, 15, 4, 5, 0, time.UTC),
		time.Date(1999, 1, 2, 3, 4, 5, 6, time.UTC),
	} {
		want, _ := json.Marshal(tm)
		got, err := json.Marshal(StampOf(tm))
		if err != nil || string(got) != string(want) {
			t.Fatalf("%v: stamp encodes as %s (%v), time as %s", tm, got, err, want)
		}
		var back Stamp
		if err := json.Unmarshal(want, &back); err != nil || !back.Time().Equal(tm) || back.Time().IsZero() != tm.IsZero() {
			t.Fatalf("%s decodes to %v (%v), want %v", want, back.Time(), err, tm)
		}
	}
	// Another zone reads as the same moment, written back in UTC.
	var s Stamp
	if err := json.Unmarshal([]byte(`"2026-11-30T17:04:05+02:00"`), &s); err != nil {
		t.Fatal(err)
	}
	if got := s.Time(); !got.Equal(time.Date(2026, 11, 30, 15, 4, 5, 0, time.UTC)) || got.Location() != time.UTC {
		t.Fatalf("zoned time read as %v", got)
	}
}

func TestStampRefusesTimesItCannotHold(t *testing.T) {
	var s Stamp
	for _, in := range []string{`"9999-01-01T00:00:00Z"`, `"1500-01-01T00:00:00Z"`} {
		err := json.Unmarshal([]byte(in), &s)
		if err == nil || !strings.Contains(err.Error(), "outside the years") {
			t.Fatalf("%s: want a refusal, got %v (%v)", in, err, s.Time())
		}
	}
	if err := json.Unmarshal([]byte(`"yesterday"`), &s); err == nil {
		t.Fatal("a malformed time must be refused")
	}
	// Conversions from a clock saturate instead of wrapping around.
	if StampOf(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)) <= StampOf(time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatal("a time past the span must stay later than one inside it")
	}
}

func TestStampOrdersLikeTime(t *testing.T) {
	a := time.Date(2026, 11, 30, 15, 0, 0, 1, time.UTC)
	b := a.Add(time.Nanosecond)
	if !StampOf(a).Before(StampOf(b)) || !StampOf(b).After(StampOf(a)) || StampOf(b).Sub(StampOf(a)) != time.Nanosecond {
		t.Fatal("stamps one nanosecond apart must compare as their times do")
	}
	if !Stamp(0).IsZero() || StampOf(time.Time{}) != 0 || !Stamp(0).Time().IsZero() {
		t.Fatal("the zero time and the zero stamp must convert into each other")
	}
}

// The records a replica holds per task stay in small size classes: a
// pending task costs its Task record, and its first timeline event.
func TestRecordsStaySmall(t *testing.T) {
	for _, c := range []struct {
		name       string
		size, most uintptr
	}{
		{"Task", unsafe.Sizeof(Task{}), 112},
		{"TimelineEvent", unsafe.Sizeof(TimelineEvent{}), 40},
		// An attempt's end reason (16 bytes) took it from the 176-byte
		// class to the 192-byte one: about 2% of a finished task.
		{"Attempt", unsafe.Sizeof(Attempt{}), 192},
	} {
		if c.size > c.most {
			t.Errorf("%s is %d bytes, want at most %d", c.name, c.size, c.most)
		}
	}
}
