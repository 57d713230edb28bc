package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"herd/fsm"
)

// fakeEntry is an entry the fake Raft holds until the test releases it;
// its response echoes each command's body, or refuses it when the body
// says so, as the FSM answers a batch command by command.
type fakeEntry struct {
	data    []byte
	release chan struct{}
	index   uint64
}

func (e *fakeEntry) Error() error  { <-e.release; return nil }
func (e *fakeEntry) Index() uint64 { return e.index }
func (e *fakeEntry) Response() any {
	answer := func(cmd []byte) any {
		if string(cmd[2:]) == "refuse" {
			return errors.New("refused")
		}
		return string(cmd[2:])
	}
	if fsm.MessageType(e.data[0]) != fsm.MsgBatch {
		return answer(e.data)
	}
	cmds, err := fsm.DecodeBatch(e.data)
	if err != nil {
		return err
	}
	out := make(fsm.BatchResult, len(cmds))
	for i, c := range cmds {
		out[i] = answer(c)
	}
	return out
}

type fakeRaft struct {
	mu      sync.Mutex
	entries []*fakeEntry
	open    bool // after releaseAll: entries commit at once
}

func (r *fakeRaft) Apply(cmd []byte, _ time.Duration) raft.ApplyFuture {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := &fakeEntry{data: cmd, release: make(chan struct{}), index: uint64(len(r.entries) + 1)}
	if r.open {
		close(e.release)
	}
	r.entries = append(r.entries, e)
	return e
}

// releaseAll commits every entry held and every later one.
func (r *fakeRaft) releaseAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.entries {
		select {
		case <-e.release:
		default:
			close(e.release)
		}
	}
	r.open = true
}

func (r *fakeRaft) entry(i int) *fakeEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i < len(r.entries) {
		return r.entries[i]
	}
	return nil
}

// runCoalescer starts a coalescer over r; stop ends it, committing
// whatever r still holds so that no waiter is left behind.
func runCoalescer(r *fakeRaft) (c *coalescer, stop func()) {
	c = newCoalescer(r, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); c.run(ctx, &wg) }()
	return c, func() { cancel(); r.releaseAll(); wg.Wait() }
}

func command(body string) []byte { return append([]byte{byte(fsm.MsgNoop), 1}, body...) }

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Commands proposed while the in-flight entries commit go out together in
// the next entry, and each proposer gets its own answer, a refusal
// included; a lone command goes out at once, as itself.
func TestCoalescerBatchesWhatArrivesWhileEntriesCommit(t *testing.T) {
	r := &fakeRaft{}
	c, stop := runCoalescer(r)
	defer stop()
	stopped := make(chan struct{})

	results := make([]commandResult, coalesceInFlight+10)
	var callers sync.WaitGroup
	propose := func(i int, body string) {
		callers.Add(1)
		go func() { defer callers.Done(); results[i] = c.propose(context.Background(), stopped, command(body)) }()
	}
	// The first commands each take an in-flight slot, alone.
	for i := range coalesceInFlight {
		propose(i, fmt.Sprint("lone-", i))
		waitFor(t, "a lone entry", func() bool { return r.entry(i) != nil })
	}
	// Ten more arrive while all of them are in flight: they queue.
	for i := coalesceInFlight; i < len(results); i++ {
		body := fmt.Sprint("cmd-", i)
		if i == coalesceInFlight+3 {
			body = "refuse"
		}
		propose(i, body)
	}
	waitFor(t, "ten queued commands", func() bool { return len(c.queue) == 10 })
	if r.entry(coalesceInFlight) != nil {
		t.Fatal("an entry went out while every in-flight slot was taken")
	}
	close(r.entry(0).release)
	waitFor(t, "the batch entry", func() bool { return r.entry(coalesceInFlight) != nil })
	for i := 1; i < coalesceInFlight; i++ {
		close(r.entry(i).release)
	}
	batch := r.entry(coalesceInFlight)
	if fsm.MessageType(batch.data[0]) != fsm.MsgBatch {
		t.Fatalf("the queued commands went out as type %d, want one batch", batch.data[0])
	}
	close(batch.release)
	callers.Wait()

	for i, res := range results {
		switch {
		case res.err != nil:
			t.Fatalf("command %d: %v", i, res.err)
		case i < coalesceInFlight:
			if res.resp != fmt.Sprint("lone-", i) || res.index != uint64(i+1) {
				t.Fatalf("lone command %d got %v at %d", i, res.resp, res.index)
			}
		case i == coalesceInFlight+3:
			if err, ok := res.resp.(error); !ok || err.Error() != "refused" {
				t.Fatalf("the refused command got %v, want its own refusal", res.resp)
			}
		default:
			if res.resp != fmt.Sprint("cmd-", i) || res.index != batch.index {
				t.Fatalf("batched command %d got %v at %d, want its own answer at %d", i, res.resp, res.index, batch.index)
			}
		}
	}
	if got := c.entries.Load(); got != coalesceInFlight+1 {
		t.Fatalf("%d entries for %d commands, want %d", got, len(results), coalesceInFlight+1)
	}
}

// A proposer whose context ends, or whose server stops, stops waiting
// with an error instead of hanging on an entry that never answers.
func TestCoalescerProposerStopsWaiting(t *testing.T) {
	r := &fakeRaft{}
	c, stop := runCoalescer(r)

	pctx, pcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer pcancel()
	if res := c.propose(pctx, nil, command("held")); !errors.Is(res.err, context.DeadlineExceeded) {
		t.Fatalf("got %+v, want the context's error", res)
	}
	stopped := make(chan struct{})
	close(stopped)
	if res := c.propose(context.Background(), stopped, command("late")); !errors.Is(res.err, raft.ErrRaftShutdown) {
		t.Fatalf("got %+v, want raft's shutdown error", res)
	}
	waitFor(t, "the held entry", func() bool { return r.entry(0) != nil })
	stop()
}
