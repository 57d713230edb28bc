// Package gcpace bounds in bytes how far a process's heap grows past what
// is live before the collector runs again.
//
// Go's collector lets the heap grow GOGC percent (100 by default) past
// the heap left live by the last collection. A replica's live heap is
// mostly its replicated state, which outlives every collection, so with
// a large state the default doubles the footprint for memory that never
// becomes garbage. A Pacer lowers the percentage after each collection so
// that the growth stays within a headroom in bytes: a small heap keeps
// the GOGC the process started with (and its collection rate), a large
// one is collected more often and grows past its live state by the
// headroom only (by MinPercent of it, once that is more). The collector's CPU is proportional to the allocation rate
// over the percentage, so the cost falls on processes whose live heap
// exceeds the headroom, and only while they allocate.
package gcpace

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// MinPercent is the lowest target a Pacer sets: below it collections
// come so often that the collector, not the work, would use the CPU.
const MinPercent = 25

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
	max      int
	current  atomic.Int64
	samples  []metrics.Sample // used by the finalizer goroutine only

	mu      sync.Mutex // orders a collection's update against Stop
	stopped bool
}

// sentinel is garbage from the moment it is armed: its finalizer runs
// after the collection that finds it, and arms the next. Its pointer
// keeps it out of the tiny allocator, whose blocks may outlive it.
type sentinel struct{ p *Pacer }

// Start paces the collector within headroom bytes, below the GOGC the
// process runs with (its environment's or a SetGCPercent before it). With
// collection off (GOGC=off) there is nothing to pace and Start returns
// nil; Stop on nil does nothing.
func Start(headroom uint64) *Pacer {
	samples := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(samples[:1])
	if samples[0].Value.Kind() != metrics.KindUint64 {
		return nil
	}
	gogc := int(int64(samples[0].Value.Uint64()))
	if gogc <= 0 {
		return nil
	}
	p := &Pacer{headroom: headroom, max: gogc, samples: samples[1:]}
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
	return true
}

// Current is the target the Pacer set last (the starting GOGC before the
// first collection).
func (p *Pacer) Current() int { return int(p.current.Load()) }

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
	debug.SetGCPercent(p.max)
}
