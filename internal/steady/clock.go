// Package steady is a wall clock that does not follow steps: what a
// replica writes into commands as "now", and what an agent ages its files
// by.
package steady

import (
	"sync"
	"time"
)

// A replica's clock is what it writes into commands as "now" and what it
// judges deadlines by (liveness silence, schedule-to-start, retention); an
// agent's is what it ages its logs and working directories by. It follows the wall clock, but not its steps: when the wall clock jumps
// (an operator or NTP setting it), deadlines measured across the jump
// would fire minutes early or late, a whole fleet would look silent at
// once, finished tasks would be forgotten early. So the clock advances at
// the rate of the replica's monotonic time and follows the wall clock
// only as long as the two agree within stepTolerance; a larger difference
// is absorbed by running up to slewRate faster or slower until they agree
// again, and the clock never goes back.
const (
	stepTolerance = time.Second
	slewRate      = 0.05
)

// Clock is that clock. Safe for concurrent use.
type Clock struct {
	wall    func() time.Time     // the wall clock
	elapsed func() time.Duration // monotonic time passed since some fixed start

	mu       sync.Mutex
	last     time.Time     // the last reading given out
	lastMono time.Duration // elapsed() at that reading
}

// New is the clock over wall and elapsed; nil means the process's wall
// and monotonic clocks.
func New(wall func() time.Time, elapsed func() time.Duration) *Clock {
	if wall == nil {
		wall = time.Now
	}
	if elapsed == nil {
		start := time.Now()
		elapsed = func() time.Duration { return time.Since(start) }
	}
	return &Clock{wall: wall, elapsed: elapsed}
}

// Now reads the clock: a wall-clock time (no monotonic reading), never
// before an earlier reading.
func (c *Clock) Now() time.Time {
	w := c.wall().Round(0)
	m := c.elapsed()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last.IsZero() {
		c.last, c.lastMono = w, m
		return w
	}
	passed := max(m-c.lastMono, 0)
	next := c.last.Add(passed) // where the clock is by monotonic time
	if off := w.Sub(next); off >= -stepTolerance && off <= stepTolerance {
		next = w // the two agree: follow the wall clock exactly
	} else {
		slew := time.Duration(float64(passed) * slewRate)
		next = next.Add(min(max(off, -slew), slew))
	}
	if next.Before(c.last) {
		next = c.last
	}
	c.last, c.lastMono = next, m
	return next
}
