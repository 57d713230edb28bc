// Package gcpace bounds in bytes how far a process's heap grows past what
// is live before the collector runs again.
//
// Go's collector lets the heap grow GOGC percent (100 by default) past
// the heap left live by the last collection. A replica's live heap is
// mostly its replicated state, which outlives every collection, so with
// a large state the default doubles the footprint for memory that never
// becomes garbage; with a small one it collects every few megabytes
// allocated, and a busy replica spends a sixth of its CPU on it. A Pacer
// sets the percentage after each collection so that the heap grows by
// the headroom in bytes: a large heap is collected more often than Go's
// default would and grows past its live state by the headroom only (by
// MinPercent of it, once that is more); a small one is collected less
// often, growing by the headroom but at most MaxPercent of itself. The
// collector's CPU is proportional to the allocation rate over the
// percentage, and the memory it lets the heap grow by is the headroom
// whatever the live size.
package gcpace

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// MinPercent is the lowest target a Pacer sets: below it collections
// come so often that the collector, not the work, would use the CPU.
const MinPercent = 25

// MaxPercent is the highest target a Pacer sets in a process that runs
// with Go's default GOGC: a heap far smaller than the headroom grows by
// at most four times itself between collections, so a process with
// little live stays small.
const MaxPercent = 400

// Percent is the collector target for a heap with live bytes live: the
// largest percentage up to maxPercent whose growth stays within headroom
// bytes, but not below MinPercent (nor below maxPercent, when that is
// lower still).
func Percent(live, headroom uint64, maxPercent int) int {
	if maxPercent <= MinPercent || live == 0 {
		return maxPercent
	}
	p := headroom * 100 / live
	switch {
	case p >= uint64(maxPercent):
		return maxPercent
	case p < MinPercent:
		return MinPercent
	}
	return int(p)
}

// A Pacer sets the collector's target after every collection from the
// live heap that collection left.
type Pacer struct {
	headroom uint64
	start    int // the GOGC the process ran with, restored by Stop
	max      int
	current  atomic.Int64
	paced    atomic.Uint64    // collections the Pacer has followed
	samples  []metrics.Sample // used by the finalizer goroutine only

	mu      sync.Mutex // orders a collection's update against Stop
	stopped bool
}

// sentinel is garbage from the moment it is armed: its finalizer runs
// after the collection that finds it, and arms the next. Its pointer
// keeps it out of the tiny allocator, whose blocks may outlive it.
type sentinel struct{ p *Pacer }

// Start paces the collector within headroom bytes. A GOGC the process
// was given (its environment's, or one other than Go's default set by a
// SetGCPercent before Start) is the highest target it sets; with Go's
// default the highest is MaxPercent.
// With collection off (GOGC=off) there is nothing to pace and Start
// returns nil; Stop on nil does nothing.
func Start(headroom uint64) *Pacer {
	return start(headroom, os.Getenv("GOGC") != "")
}

func start(headroom uint64, gogcGiven bool) *Pacer {
	samples := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(samples[:1])
	if samples[0].Value.Kind() != metrics.KindUint64 {
		return nil
	}
	gogc := int(int64(samples[0].Value.Uint64()))
	if gogc <= 0 {
		return nil
	}
	max := gogc
	if gogc == defaultGOGC && !gogcGiven {
		max = MaxPercent
	}
	p := &Pacer{headroom: headroom, start: gogc, max: max, samples: samples[1:]}
	p.current.Store(int64(gogc))
	p.arm()
	return p
}

func (p *Pacer) arm() {
	runtime.SetFinalizer(&sentinel{p: p}, func(s *sentinel) {
		if s.p.collected() {
			s.p.arm()
		}
	})
}

// collected runs after each collection, on the finalizer goroutine, and
// reports whether pacing goes on.
func (p *Pacer) collected() bool {
	metrics.Read(p.samples)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return false
	}
	if p.samples[0].Value.Kind() != metrics.KindUint64 {
		return true
	}
	want := Percent(p.samples[0].Value.Uint64(), p.headroom, p.max)
	if int64(want) != p.current.Load() {
		debug.SetGCPercent(want)
		p.current.Store(int64(want))
	}
	p.paced.Add(1)
	return true
}

// Current is the target the Pacer set last (the starting GOGC before the
// first collection).
func (p *Pacer) Current() int { return int(p.current.Load()) }

// defaultGOGC is Go's GOGC when the environment sets none.
const defaultGOGC = 100

// Stop ends the pacing and restores the starting GOGC.
func (p *Pacer) Stop() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	p.stopped = true
	debug.SetGCPercent(p.start)
}
