package fsm

import (
	"context"
	"reflect"
	"sync"
)

// WatchSet collects the channels a blocking reader waits on (see
// State.PendingTasks, WatchNodes, LiveAttemptsOnNode). A nil WatchSet is
// valid and collects nothing.
type WatchSet map[<-chan struct{}]struct{}

// NewWatchSet returns an empty set.
func NewWatchSet() WatchSet { return WatchSet{} }

// Add adds a channel to wait on.
func (w WatchSet) Add(ch <-chan struct{}) {
	if w != nil {
		w[ch] = struct{}{}
	}
}

// WatchCtx blocks until one of the channels closes (nil) or ctx ends
// (its error). An empty set waits for ctx alone.
func (w WatchSet) WatchCtx(ctx context.Context) error {
	cases := make([]reflect.SelectCase, 0, len(w)+1)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	for ch := range w {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	if chosen, _, _ := reflect.Select(cases); chosen == 0 {
		return ctx.Err()
	}
	return nil
}

// Watch topics: what a blocking reader waits on.
const (
	topicPending = "pending"   // the set of pending tasks, or one of them, changed
	topicNodes   = "nodes"     // a node record changed
	topicJobs    = "jobs"      // a job record changed
	topicEvents  = "events"    // the event stream grew
	topicNodePre = "attempts/" // + node id: an attempt on that node changed
)

func (s *store) touch(topic string) {
	if s.w != nil {
		s.w.touched[topic] = struct{}{}
	}
}

// watchHub hands out channels that close when a topic changes after a
// given index. A reader holding a view at index i asks for topic t as of
// i: if t already changed after i, it gets a closed channel, so no change
// between taking the view and starting to wait is missed.
type watchHub struct {
	mu       sync.Mutex
	chans    map[string]chan struct{}
	changed  map[string]uint64 // topic → index of its latest change
	restored uint64            // index of the latest restore: every topic changed
}

func newWatchHub() *watchHub {
	return &watchHub{chans: map[string]chan struct{}{}, changed: map[string]uint64{}}
}

func (h *watchHub) watch(topic string, asOf uint64) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.changed[topic] > asOf || h.restored > asOf {
		return closedChan
	}
	ch, ok := h.chans[topic]
	if !ok {
		ch = make(chan struct{})
		h.chans[topic] = ch
	}
	return ch
}

// fire records that topics changed at index and wakes their waiters.
func (h *watchHub) fire(topics map[string]struct{}, index uint64) {
	if len(topics) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for t := range topics {
		h.changed[t] = index
		if ch, ok := h.chans[t]; ok {
			close(ch)
			delete(h.chans, t)
		}
	}
}

// fireAll wakes every waiter: the whole state was replaced at index.
func (h *watchHub) fireAll(index uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.restored = index
	for t, ch := range h.chans {
		close(ch)
		delete(h.chans, t)
	}
}
