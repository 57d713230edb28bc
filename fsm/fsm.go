// Package fsm is herd's replicated state machine: the versioned command
// encoding, a deterministic Apply, and snapshot/restore. Every replica
// applies the same Raft entries in the same order and so holds the same
// state; nothing in Apply reads a clock, draws randomness or depends on
// map iteration order. Timestamps travel inside commands.
package fsm

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// BatchResult holds one response per command of a batch entry, in order.
type BatchResult []any

// FSM implements raft.FSM over an in-memory indexed store.
type FSM struct {
	logger hclog.Logger

	// mu serialises the writer (Apply, Restore) with taking a view: a
	// view clones the store, which must not race a write. It is held for
	// one entry at a time, so a reader waits at most that long.
	mu    sync.Mutex
	db    *store        // the writer's store
	view  *State        // cached view of db at index; nil after a write
	index atomic.Uint64 // last applied Raft index

	watches *watchHub

	// Commands applied by payload form, since the process started (what
	// the leader has been writing, during an upgrade).
	appliedJSON, appliedBinary atomic.Uint64
	// appliedByType counts the commands applied of each known type, and
	// appliedBytes the bytes of the entries applied, since the process
	// started: what the work cost the log (no part of the state).
	appliedByType [len(commands)]atomic.Uint64
	appliedBytes  atomic.Uint64

	// afterApply, when set, observes the state after every entry (tests
	// check invariants with it). It must not modify anything.
	afterApply func(index uint64, st *State)
}

// AppliedForms counts the commands this FSM applied (or refused) in each
// payload form since the process started.
func (f *FSM) AppliedForms() (json, binary uint64) {
	return f.appliedJSON.Load(), f.appliedBinary.Load()
}

// AppliedCommands counts, by command name, the commands this FSM applied
// (or refused) since the process started; AppliedBytes is the size of the
// entries they came in. Read before and after a workload, they give its
// commands and log bytes per task.
func (f *FSM) AppliedCommands() map[string]uint64 {
	out := map[string]uint64{}
	for t := range f.appliedByType {
		if n := f.appliedByType[t].Load(); n > 0 {
			out[commands[t].name] += n
		}
	}
	return out
}

// AppliedBytes is the size of the entries this FSM applied since the
// process started.
func (f *FSM) AppliedBytes() uint64 { return f.appliedBytes.Load() }

// SetAfterApply installs an observer called after every applied entry.
// Set it before the FSM is used; it runs on the apply goroutine.
func (f *FSM) SetAfterApply(fn func(index uint64, st *State)) { f.afterApply = fn }

// New returns an empty state machine.
func New(logger hclog.Logger) *FSM {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &FSM{logger: logger.Named("fsm"), db: newStore(), watches: newWatchHub()}
}

// State returns a read-only view of the latest applied state. Views are
// shared until the next write, so readers between two entries pay for
// one clone.
func (f *FSM) State() *State {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.view == nil {
		f.view = &State{st: f.db.clone(), index: f.index.Load(), watches: f.watches}
	}
	return f.view
}

// Index is the last applied Raft index.
func (f *FSM) Index() uint64 { return f.index.Load() }

// Apply applies one Raft log entry. Configuration and other non-command
// entries are not delivered here by hashicorp/raft.
func (f *FSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	f.db.w.index = l.Index
	f.appliedBytes.Add(uint64(len(l.Data)))
	resp := f.applyEntry(f.db, l.Index, l.Data)
	f.index.Store(l.Index)
	f.view = nil
	f.watches.fire(f.db.w.touched, l.Index)
	clear(f.db.w.touched)
	f.mu.Unlock()
	if f.afterApply != nil {
		f.afterApply(l.Index, f.State())
	}
	return resp
}

// ApplyBytes applies data as if it were the entry at index. It exists for
// tests and fuzzing, which drive the FSM without a Raft log.
func (f *FSM) ApplyBytes(index uint64, data []byte) any {
	return f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data})
}

func (f *FSM) applyEntry(db *store, index uint64, data []byte) any {
	h, payload, err := decodeHeader(data)
	if err != nil {
		f.logger.Error("refusing undecodable entry", "index", index, "error", err)
		return err
	}
	if h.typ != MsgBatch {
		return f.applyOne(db, index, h, payload)
	}
	cmds, err := splitBatch(payload)
	if err != nil {
		f.logger.Error("refusing undecodable batch", "index", index, "error", err)
		return err
	}
	out := make(BatchResult, len(cmds))
	for i, c := range cmds {
		ch, p, err := decodeHeader(c)
		switch {
		case err != nil:
			out[i] = err
		case ch.typ == MsgBatch:
			out[i] = fmt.Errorf("%w: nested batch", ErrMalformedCommand)
		default:
			out[i] = f.applyOne(db, index, ch, p)
		}
	}
	return out
}

func (f *FSM) applyOne(db *store, index uint64, h header, payload []byte) any {
	c, ok := commandOf(h.typ)
	if !ok || c.apply == nil {
		if h.ignorable {
			f.logger.Warn("skipping unknown ignorable command", "index", index, "type", h.typ)
			return nil
		}
		f.logger.Error("refusing unknown command", "index", index, "type", h.typ)
		return fmt.Errorf("%w %s at index %d", ErrUnknownCommand, h.typ, index)
	}
	f.appliedByType[h.typ&^IgnoreUnknownFlag].Add(1)
	if c.form == formBinary {
		f.appliedBinary.Add(1)
	} else {
		f.appliedJSON.Add(1)
	}
	resp, err := c.apply(db, index, payload)
	if err != nil {
		return err
	}
	return resp
}

// Snapshot returns a point-in-time view; taking it costs O(1) because the
// store's trees are copy-on-write. Persist streams it without blocking Apply.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return &snapshot{state: f.State()}, nil
}

type snapshot struct{ state *State }

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := writeSnapshot(sink, s.state); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *snapshot) Release() {}

// Restore replaces the whole state with the snapshot read from rc.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	db, index, err := readSnapshot(rc)
	if err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	db.eventsFrom = index + 1
	f.mu.Lock()
	f.db = db
	f.index.Store(index)
	f.view = nil
	f.watches.fireAll(index)
	f.mu.Unlock()
	f.logger.Info("restored state from snapshot", "index", index)
	return nil
}
