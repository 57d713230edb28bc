package cluster

import (
	"context"
	"errors"
	"testing"
	"time"
)

// heldFuture is a raft future that is not answered until released.
type heldFuture chan struct{}

func (f heldFuture) Error() error { <-f; return nil }

type doneFuture struct{ err error }

func (f doneFuture) Error() error { return f.err }

// awaitFuture gives up when its context ends, even if raft never answers,
// and passes an answer through otherwise.
func TestAwaitFutureStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	held := make(heldFuture)
	defer close(held) // lets the waiter go, for the leak check that follows
	if err := awaitFuture(ctx, held); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unanswered future: got %v, want the context's error", err)
	}
	want := errors.New("leadership lost")
	if err := awaitFuture(context.Background(), doneFuture{want}); err != want {
		t.Fatalf("answered future: got %v, want %v", err, want)
	}
}
