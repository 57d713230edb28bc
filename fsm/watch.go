package fsm

import (
	"context"
	"reflect"
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
