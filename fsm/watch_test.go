package fsm

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestWatchSetWakesOnCloseOrContext(t *testing.T) {
	ws := NewWatchSet()
	a, b := make(chan struct{}), make(chan struct{})
	ws.Add(a)
	ws.Add(b)
	close(b)
	if err := ws.WatchCtx(context.Background()); err != nil {
		t.Fatalf("a closed channel did not wake the set: %v", err)
	}
	ws = NewWatchSet()
	ws.Add(a) // never closed
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := ws.WatchCtx(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an open channel: %v, want the context's deadline", err)
	}
	var none WatchSet
	none.Add(a) // a nil set collects nothing and does not panic
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := none.WatchCtx(ctx2); !errors.Is(err, context.Canceled) {
		t.Fatalf("empty set: %v, want canceled", err)
	}
}
