package steady

import (
	"testing"
	"time"
)

// The clock follows the wall clock while it runs true, absorbs a step
// slowly (forward or back), never goes back, and agrees with the wall
// clock again once the step is absorbed.
func TestSteadyClockAbsorbsSteps(t *testing.T) {
	base := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var mono time.Duration
	step := time.Duration(0)
	c := New(func() time.Time { return base.Add(mono + step) }, func() time.Duration { return mono })
	read := func() time.Time { return c.Now() }
	if got := read(); !got.Equal(base) {
		t.Fatalf("first reading %v, want the wall clock %v", got, base)
	}
	mono += time.Minute
	if got := read(); !got.Equal(base.Add(time.Minute)) {
		t.Fatalf("a true wall clock is not followed: %v", got)
	}
	// Small differences (ordinary corrections) are followed at once.
	step = 300 * time.Millisecond
	mono += time.Second
	if got := read(); !got.Equal(base.Add(time.Minute + time.Second + step)) {
		t.Fatalf("a 300 ms correction is not followed: %v", got)
	}
	for _, s := range []time.Duration{10 * time.Minute, -10 * time.Minute} {
		step = s
		before := read()
		mono += time.Second
		after := read()
		if d := after.Sub(before); d < time.Second-time.Duration(float64(time.Second)*slewRate) || d > time.Second+time.Duration(float64(time.Second)*slewRate) {
			t.Fatalf("step %v: one second of real time read as %v", s, d)
		}
		// A minute's deadline measured across the step is off by at most
		// the slew rate.
		start := read()
		mono += time.Minute
		if d := read().Sub(start); d < 57*time.Second || d > 63*time.Second {
			t.Fatalf("step %v: a minute read as %v", s, d)
		}
		// Given time, the clock agrees with the wall clock again.
		for i := 0; i < 1000 && read().Sub(base.Add(mono+step)).Abs() > stepTolerance; i++ {
			mono += time.Minute
		}
		if off := read().Sub(base.Add(mono + step)); off.Abs() > stepTolerance {
			t.Fatalf("step %v: still %v off the wall clock", s, off)
		}
	}
	// It never goes back, even when the wall clock does and no time passed.
	last := read()
	step -= time.Hour
	if got := read(); got.Before(last) {
		t.Fatalf("went back from %v to %v", last, got)
	}
}
