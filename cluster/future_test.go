package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// heldFuture is a raft future that is not answered until released.
type heldFuture chan struct{}

func (f heldFuture) Error() error { <-f; return nil }

type doneFuture struct{ err error }

func (f doneFuture) Error() error { return f.err }

// awaitFuture gives up when its context ends or the server stops, even if
// raft never answers, and passes an answer through otherwise.
func TestAwaitFutureStopsWithItsContextOrTheServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	held := make(heldFuture)
	defer close(held) // lets the waiters go, for the leak check that follows
	if err := awaitFuture(ctx, nil, held); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unanswered future: got %v, want the context's error", err)
	}
	stopped := make(chan struct{})
	close(stopped)
	if err := awaitFuture(context.Background(), stopped, held); !errors.Is(err, raft.ErrRaftShutdown) {
		t.Fatalf("unanswered future, server stopping: got %v, want %v", err, raft.ErrRaftShutdown)
	}
	want := errors.New("leadership lost")
	if err := awaitFuture(context.Background(), nil, doneFuture{want}); err != want {
		t.Fatalf("answered future: got %v, want %v", err, want)
	}
}
