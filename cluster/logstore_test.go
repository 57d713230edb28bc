package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"

	"herd/config"
)

// fillLogStore gives a store of kind under dir the stable keys raft
// keeps and entries first..last, as a replica whose log was truncated
// after a snapshot has them.
func fillLogStore(t *testing.T, dir, kind string, first, last uint64) {
	t.Helper()
	s, err := openLogStore(dir, kind, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("LastVoteTerm"), 6); err != nil {
		t.Fatal(err)
	}
	if err := s.Set([]byte("LastVoteCand"), []byte("s2")); err != nil {
		t.Fatal(err)
	}
	var logs []*raft.Log
	for i := first; i <= last; i++ {
		logs = append(logs, entry(i))
	}
	if len(logs) > 0 {
		if err := s.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
	}
}

// entry is the test's entry at index i: its own term, type and bytes.
func entry(i uint64) *raft.Log {
	typ := raft.LogCommand
	if i%10 == 0 {
		typ = raft.LogConfiguration
	}
	return &raft.Log{Index: i, Term: 1 + i/50, Type: typ, Data: bytes.Repeat([]byte{byte(i)}, int(i%300)), Extensions: []byte(fmt.Sprint(i))}
}

// checkLogStore reopens dir as kind and checks that it holds exactly
// what fillLogStore wrote.
func checkLogStore(t *testing.T, dir, kind string, first, last uint64) {
	t.Helper()
	s, err := openLogStore(dir, kind, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
		t.Fatalf("CurrentTerm %d (%v), want 7", v, err)
	}
	if v, err := s.GetUint64([]byte("LastVoteTerm")); err != nil || v != 6 {
		t.Fatalf("LastVoteTerm %d (%v), want 6", v, err)
	}
	if v, err := s.Get([]byte("LastVoteCand")); err != nil || string(v) != "s2" {
		t.Fatalf("LastVoteCand %q (%v), want s2", v, err)
	}
	gotFirst, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	gotLast, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if gotFirst != first || gotLast != last {
		t.Fatalf("%s holds entries %d..%d, want %d..%d", kind, gotFirst, gotLast, first, last)
	}
	for i := first; i <= last && last > 0; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		want := entry(i)
		if l.Index != want.Index || l.Term != want.Term || l.Type != want.Type || !bytes.Equal(l.Data, want.Data) || !bytes.Equal(l.Extensions, want.Extensions) {
			t.Fatalf("entry %d is %+v, want %+v", i, l, *want)
		}
	}
}

func present(t *testing.T, path string) bool {
	t.Helper()
	ok, err := exists(path)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestLogStoreChangeCopiesTheLogBothWays(t *testing.T) {
	dir := t.TempDir()
	// More than one append's worth, starting past 1 as after a truncation.
	const first, last = 101, 40_000
	fillLogStore(t, dir, config.LogStoreBoltDB, first, last)

	checkLogStore(t, dir, config.LogStoreWAL, first, last)
	if present(t, filepath.Join(dir, "raft.db")) || !present(t, filepath.Join(dir, "wal")) || present(t, filepath.Join(dir, "wal.migrating")) {
		t.Fatal("after the change to wal, only wal should be left")
	}
	// And back, with an entry appended in between.
	s, err := openLogStore(dir, config.LogStoreWAL, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLog(entry(last + 1)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	checkLogStore(t, dir, config.LogStoreBoltDB, first, last+1)
	if present(t, filepath.Join(dir, "wal")) || !present(t, filepath.Join(dir, "raft.db")) {
		t.Fatal("after the change back to boltdb, only raft.db should be left")
	}
}

func TestLogStoreChangeOfAnEmptyLog(t *testing.T) {
	for _, from := range []string{config.LogStoreBoltDB, config.LogStoreWAL} {
		dir := t.TempDir()
		fillLogStore(t, dir, from, 1, 0) // stable keys, no entries
		checkLogStore(t, dir, otherLogStore(from), 0, 0)
	}
}

func TestLogStoreChangeRecoversFromAnInterruptedCopy(t *testing.T) {
	dir := t.TempDir()
	fillLogStore(t, dir, config.LogStoreBoltDB, 1, 500)
	// A copy that stopped half-way: it is thrown away and made again.
	if err := os.MkdirAll(filepath.Join(dir, "wal.migrating"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "wal.migrating", "00000000000000000001-0000000000000001.wal"), []byte("torn"), 0o640); err != nil {
		t.Fatal(err)
	}
	checkLogStore(t, dir, config.LogStoreWAL, 1, 500)
	if present(t, filepath.Join(dir, "wal.migrating")) {
		t.Fatal("the unfinished copy is still there")
	}
}

func TestLogStoreChangeFinishesARemoval(t *testing.T) {
	dir := t.TempDir()
	fillLogStore(t, dir, config.LogStoreWAL, 1, 300)
	// A copy renamed into place whose source was not removed yet: the
	// configured store is the complete one and the other goes.
	stale := t.TempDir()
	fillLogStore(t, stale, config.LogStoreBoltDB, 1, 5)
	if err := os.Rename(filepath.Join(stale, "raft.db"), filepath.Join(dir, "raft.db")); err != nil {
		t.Fatal(err)
	}
	checkLogStore(t, dir, config.LogStoreWAL, 1, 300)
	if present(t, filepath.Join(dir, "raft.db")) {
		t.Fatal("the store already copied from was not removed")
	}
}

func TestLogStoreUnknownKind(t *testing.T) {
	_, err := openLogStore(t.TempDir(), "leveldb", hclog.NewNullLogger())
	if err == nil || !strings.Contains(err.Error(), `unknown raft log store "leveldb"`) {
		t.Fatalf("want an error naming the kind, got %v", err)
	}
}

// TestLogStoreCloseReleasesItsFiles: a replica restarted in the same
// process opens its log again, which needs every file (and the lock on
// the meta database) of the last open given back.
func TestLogStoreCloseReleasesItsFiles(t *testing.T) {
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skipf("cannot count open files here: %v", err)
		}
		return len(ents)
	}
	for _, kind := range []string{config.LogStoreWAL, config.LogStoreBoltDB} {
		dir := t.TempDir()
		fillLogStore(t, dir, kind, 1, 50)
		before := fds()
		for range 3 {
			checkLogStore(t, dir, kind, 1, 50)
		}
		if after := fds(); after != before {
			t.Fatalf("%s: %d files open before three opens and closes, %d after", kind, before, after)
		}
	}
}

// checkWAL reopens dir's wal store and checks that it holds 1..last and
// takes an append after it, twice over (the second open finds what the
// first repaired or appended).
func checkWAL(t *testing.T, dir string, last uint64) {
	t.Helper()
	for round := range 2 {
		s, err := openLogStore(dir, config.LogStoreWAL, hclog.NewNullLogger())
		if err != nil {
			t.Fatalf("open %d: %v", round, err)
		}
		got, err := s.LastIndex()
		if err != nil || got != last {
			t.Fatalf("open %d: last index %d (%v), want %d", round, got, err, last)
		}
		for i := uint64(1); i <= last; i++ {
			var l raft.Log
			if err := s.GetLog(i, &l); err != nil || l.Index != i {
				t.Fatalf("open %d: entry %d: %v", round, i, err)
			}
		}
		last++
		if err := s.StoreLogs([]*raft.Log{{Index: last, Term: 1, Data: []byte("after")}}); err != nil {
			t.Fatalf("open %d: append %d: %v", round, last, err)
		}
		s.Close()
	}
}

// A stop right after the append that seals a segment, before raft-wal's
// background rotation records it, used to leave a log that refused every
// append at every open.
func TestWALStopRightAfterASealKeepsAppending(t *testing.T) {
	dir := t.TempDir()
	checkWAL(t, dir, sealedSegment(t, dir, 1))
}

// A crash that tears the batch sealing a segment (its commit frame never
// written) loses that batch, which was never acknowledged, and nothing
// else; the log takes appends again. The segment is filled by batches of
// one entry, as raft appends them.
func TestWALTornSealIsRepaired(t *testing.T) {
	dir := t.TempDir()
	last := sealedSegment(t, dir, 1)
	seg := tearLastBatch(t, dir)
	checkWAL(t, dir, last-1)
	if _, err := os.Stat(seg); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the segment with the torn seal is still there (%v): it should have been replaced", err)
	}
}

// A torn batch that alone filled and sealed an empty segment leaves no
// entry behind, and the log starts again where that batch began.
func TestWALTornSealOfAnEmptySegmentIsRepaired(t *testing.T) {
	dir := t.TempDir()
	sealedSegment(t, dir, walSegmentBytes/(32<<10)+50)
	tearLastBatch(t, dir)
	checkWAL(t, dir, 0)
}

// sealedSegment builds, in dir, the wal store a crash right after a
// segment's seal leaves: a meta database listing one unsealed segment,
// and that segment filled from index 1 by batches of per raft entries
// of 32 KiB, encoded as the WAL encodes them, until one seals it. It
// returns the last index written. The state is built with raft-wal's own
// parts rather than a WAL, whose background rotation could otherwise
// create the next segment first.
func sealedSegment(t *testing.T, dir string, per uint64) uint64 {
	t.Helper()
	walDir := filepath.Join(dir, "wal")
	if err := os.MkdirAll(walDir, 0o750); err != nil {
		t.Fatal(err)
	}
	meta := &metadb.BoltMetaDB{}
	if _, err := meta.Load(walDir); err != nil {
		t.Fatal(err)
	}
	info := types.SegmentInfo{ID: 1, BaseIndex: 1, MinIndex: 1, SizeLimit: walSegmentBytes, Codec: wal.CodecBinaryV1, CreateTime: time.Now()}
	if err := meta.CommitState(types.PersistentState{NextSegmentID: 2, Segments: []types.SegmentInfo{info}}); err != nil {
		t.Fatal(err)
	}
	meta.Close()
	w, err := segment.NewFiler(walDir, walfs.New()).Create(info)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var codec wal.BinaryCodec
	data := make([]byte, 32<<10)
	var last uint64
	for {
		batch := make([]types.LogEntry, per)
		for i := range batch {
			last++
			var b bytes.Buffer
			if err := codec.Encode(&raft.Log{Index: last, Term: 1, Data: data}, &b); err != nil {
				t.Fatal(err)
			}
			batch[i] = types.LogEntry{Index: last, Data: b.Bytes()}
		}
		if err := w.Append(batch); err != nil {
			t.Fatal(err)
		}
		if sealed, _, _ := w.Sealed(); sealed {
			return last
		}
		if last > 2*walSegmentBytes/(32<<10) {
			t.Fatalf("%d entries of 32 KiB did not seal a segment of %d bytes", last, walSegmentBytes)
		}
	}
}

// tearLastBatch zeroes the end of the last batch written to the WAL's one
// segment (its commit frame and the end of the seal's index before it),
// as a crash during its write would, and returns the segment's path.
func tearLastBatch(t *testing.T, dir string) string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "wal", "*.wal"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("want the one sealed segment, found %v (%v)", segs, err)
	}
	b, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	end := len(b)
	for end > 0 && b[end-1] == 0 {
		end--
	}
	if err := os.WriteFile(segs[0], append(b[:end-64], make([]byte, len(b)-end+64)...), 0o640); err != nil {
		t.Fatal(err)
	}
	return segs[0]
}
