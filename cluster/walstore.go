package cluster

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// walSegmentBytes is the size of one WAL segment file. The log is
// truncated a whole segment at a time, so a smaller segment gives the
// disk back sooner after a snapshot; 16 MiB holds thousands of ordinary
// entries (a placement batch is tens of KB).
const walSegmentBytes = 16 << 20

// walStore is raft's log and stable store on raft-wal (log_store =
// "wal"), mending three ways in which raft-wal v0.4 alone falls short:
//   - Its Close leaves the meta database open, and with it the lock on
//     its file, so a replica restarted in the same process could not open
//     its log again; Close here closes both.
//   - After an append fails (a full disk) it refuses every later append,
//     even once space is back. The next write after a failure opens the
//     WAL again, which recovers its tail from disk as at a restart (the
//     failed append, never acknowledged, is dropped), so the replica
//     appends again as soon as there is space, as it does on bbolt.
//   - A stop between the append that seals a segment and the rotation to
//     the next leaves a log that refuses every append at every later
//     open; sealRepair finishes that rotation when the WAL loads.
type walStore struct {
	path   string
	logger hclog.Logger

	// mu is held for writing only to reopen or close; every call holds it
	// for reading, so none runs on a WAL being closed.
	mu     sync.RWMutex
	wal    *wal.WAL    // nil when closed, or when a reopen failed
	meta   *sealRepair // wal's meta database
	failed atomic.Bool // a write failed: reopen before the next
	closed bool
}

func openWAL(path string, logger hclog.Logger) (*walStore, error) {
	w := &walStore{path: path, logger: logger}
	if err := w.open(); err != nil {
		return nil, err
	}
	return w, nil
}

// open opens the WAL; mu is held for writing (or w is not shared yet).
func (w *walStore) open() error {
	meta := &sealRepair{BoltMetaDB: &metadb.BoltMetaDB{}, logger: w.logger}
	l, err := wal.Open(w.path, wal.WithLogger(w.logger.Named("wal")), wal.WithSegmentSize(walSegmentBytes), wal.WithMetaStore(meta))
	if err != nil {
		_ = meta.Close()
		return fmt.Errorf("open raft log %s: %w", w.path, err)
	}
	w.wal, w.meta = l, meta
	w.failed.Store(false)
	return nil
}

// shut closes the WAL and its meta database; mu is held for writing.
func (w *walStore) shut() error {
	if w.wal == nil {
		return nil
	}
	err := w.wal.Close()
	if merr := w.meta.Close(); err == nil && merr != nil {
		err = fmt.Errorf("close the raft log's meta database: %w", merr)
	}
	w.wal, w.meta = nil, nil
	return err
}

// use runs f on the open WAL, opening it again first when the last write
// failed (for a write) or an earlier reopen did not succeed; a write that
// fails marks the WAL for reopening.
func (w *walStore) use(write bool, f func(*wal.WAL) error) error {
	w.mu.RLock()
	ready := w.closed || (w.wal != nil && !(write && w.failed.Load()))
	w.mu.RUnlock()
	if !ready {
		if err := w.reopen(write); err != nil {
			return err
		}
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed || w.wal == nil {
		return wal.ErrClosed
	}
	err := f(w.wal)
	if err != nil && write {
		w.failed.Store(true)
	}
	return err
}

func (w *walStore) reopen(write bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || (w.wal != nil && !(write && w.failed.Load())) {
		return nil // closed, or another call reopened it meanwhile
	}
	if err := w.shut(); err != nil {
		w.logger.Warn("closing the raft log to open it again", "error", err)
	}
	if err := w.open(); err != nil {
		return fmt.Errorf("open the raft log again after a failed write: %w", err)
	}
	w.logger.Info("raft log opened again after a failed write", "path", w.path)
	return nil
}

func (w *walStore) FirstIndex() (i uint64, err error) {
	err = w.use(false, func(l *wal.WAL) (e error) { i, e = l.FirstIndex(); return })
	return
}

func (w *walStore) LastIndex() (i uint64, err error) {
	err = w.use(false, func(l *wal.WAL) (e error) { i, e = l.LastIndex(); return })
	return
}

func (w *walStore) GetLog(index uint64, log *raft.Log) error {
	return w.use(false, func(l *wal.WAL) error { return l.GetLog(index, log) })
}

func (w *walStore) StoreLog(log *raft.Log) error { return w.StoreLogs([]*raft.Log{log}) }

func (w *walStore) StoreLogs(logs []*raft.Log) error {
	return w.use(true, func(l *wal.WAL) error { return l.StoreLogs(logs) })
}

func (w *walStore) DeleteRange(min, max uint64) error {
	return w.use(true, func(l *wal.WAL) error { return l.DeleteRange(min, max) })
}

func (w *walStore) Set(key, val []byte) error {
	return w.use(false, func(l *wal.WAL) error { return l.Set(key, val) })
}

func (w *walStore) Get(key []byte) (v []byte, err error) {
	err = w.use(false, func(l *wal.WAL) (e error) { v, e = l.Get(key); return })
	return
}

func (w *walStore) SetUint64(key []byte, val uint64) error {
	return w.use(false, func(l *wal.WAL) error { return l.SetUint64(key, val) })
}

func (w *walStore) GetUint64(key []byte) (v uint64, err error) {
	err = w.use(false, func(l *wal.WAL) (e error) { v, e = l.GetUint64(key); return })
	return
}

// IsMonotonic tells raft that the log takes consecutive indexes only, so
// after installing a snapshot it empties the log rather than leave a gap.
func (w *walStore) IsMonotonic() bool { return true }

func (w *walStore) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	return w.shut()
}

// sealRepair is the WAL's meta database, which on load finishes a
// rotation a stop interrupted. raft-wal seals the tail segment (writes
// its index) in the same fsync as the append that fills it, then, in the
// background, records the seal and the next segment in the meta database
// and creates that segment's file. Stopped in between, the meta database
// still lists the sealed segment as the tail, and raft-wal reopens it as
// a tail that takes no more appends, every time. Load finds that state
// and records what the rotation would have:
//   - the seal committed: the segment is recorded sealed, with its index
//     (checked to read every entry back), and a next segment after its
//     last entry, whose file raft-wal creates when it opens;
//   - the seal batch torn by a crash (its commit frame never reached the
//     disk, so none of it was acknowledged): the segment's committed
//     entries are copied into a new tail segment that replaces it, and
//     raft-wal deletes the old file when it opens.
//
// Either way the meta database changes in one commit after every new
// file is synced, so a crash during the repair leaves the state it found,
// to be repaired at the next load.
type sealRepair struct {
	*metadb.BoltMetaDB
	logger hclog.Logger
}

func (m *sealRepair) Load(dir string) (types.PersistentState, error) {
	st, err := m.BoltMetaDB.Load(dir)
	if err != nil || len(st.Segments) == 0 {
		return st, err
	}
	tail := st.Segments[len(st.Segments)-1]
	if !tail.SealTime.IsZero() {
		return st, nil
	}
	filer := segment.NewFiler(dir, walfs.New())
	w, err := filer.RecoverTail(tail)
	if err != nil {
		return st, nil // no file yet, or damage raft-wal's own open reports
	}
	defer w.Close()
	sealed, indexStart, err := w.Sealed()
	if err != nil || !sealed {
		return st, nil
	}
	last := w.LastIndex()
	sealedTail := tail
	sealedTail.IndexStart, sealedTail.MaxIndex, sealedTail.SealTime = indexStart, last, time.Now()
	if last >= tail.MinIndex && sealIntact(filer, sealedTail) {
		st.Segments[len(st.Segments)-1] = sealedTail
		st.Segments = append(st.Segments, types.SegmentInfo{
			ID: st.NextSegmentID, BaseIndex: last + 1, MinIndex: last + 1,
			Codec: tail.Codec, SizeLimit: tail.SizeLimit, CreateTime: time.Now(),
		})
		st.NextSegmentID++
		if err := m.BoltMetaDB.CommitState(st); err != nil {
			return st, fmt.Errorf("record the raft log's interrupted rotation: %w", err)
		}
		m.logger.Warn("finished a raft log rotation a stop interrupted", "segment", tail.ID, "last_index", last)
		return st, nil
	}
	// The seal was torn (or sealed a segment none of whose entries were
	// committed): copy what was committed into a new tail.
	fresh := types.SegmentInfo{
		ID: st.NextSegmentID, BaseIndex: tail.MinIndex, MinIndex: tail.MinIndex,
		Codec: tail.Codec, SizeLimit: tail.SizeLimit, CreateTime: time.Now(),
	}
	if last < tail.MinIndex {
		fresh.BaseIndex, fresh.MinIndex = tail.BaseIndex, tail.BaseIndex
	}
	_ = filer.Delete(fresh.BaseIndex, fresh.ID) // left by a repair a crash cut short
	nw, err := filer.Create(fresh)
	if err != nil {
		return st, fmt.Errorf("repair the raft log's torn seal: %w", err)
	}
	var entries []types.LogEntry
	for i := fresh.BaseIndex; i <= last; i++ {
		buf, err := w.GetLog(i)
		if err != nil {
			nw.Close()
			return st, fmt.Errorf("repair the raft log's torn seal: read entry %d: %w", i, err)
		}
		entries = append(entries, types.LogEntry{Index: i, Data: append([]byte(nil), buf.Bs...)})
		buf.Close()
	}
	if len(entries) > 0 {
		if err := nw.Append(entries); err != nil {
			nw.Close()
			return st, fmt.Errorf("repair the raft log's torn seal: %w", err)
		}
	}
	if err := nw.Close(); err != nil {
		return st, fmt.Errorf("repair the raft log's torn seal: %w", err)
	}
	if err := syncPath(dir); err != nil {
		return st, err
	}
	st.Segments[len(st.Segments)-1] = fresh
	st.NextSegmentID++
	if err := m.BoltMetaDB.CommitState(st); err != nil {
		return st, fmt.Errorf("repair the raft log's torn seal: %w", err)
	}
	m.logger.Warn("dropped a raft log batch a crash tore while it sealed a segment (never acknowledged)", "segment", tail.ID, "last_index", last)
	return st, nil
}

// sealIntact reports whether the sealed segment's index reads back every
// committed entry and none past its last.
func sealIntact(filer *segment.Filer, info types.SegmentInfo) bool {
	r, err := filer.Open(info)
	if err != nil {
		return false
	}
	defer r.Close()
	for i := info.MinIndex; i <= info.MaxIndex; i++ {
		buf, err := r.GetLog(i)
		if err != nil {
			return false
		}
		buf.Close()
	}
	buf, err := r.GetLog(info.MaxIndex + 1)
	if err == nil {
		buf.Close()
		return false
	}
	return true
}
