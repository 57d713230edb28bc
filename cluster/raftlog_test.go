package cluster

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// The Raft log file is kept without its free-page list (see
// raftLogBoltOptions). A file written the old way (the list kept) and one
// written the new way, with its head deleted as after a snapshot, must
// each open the other way with every remaining entry and the stable keys
// intact, and take appends: replicas are upgraded and downgraded with
// their data directories.
func TestRaftLogFileOpensAcrossFreelistSettings(t *testing.T) {
	kept := &bbolt.Options{} // bbolt's defaults: the list is written
	for _, order := range [][2]*bbolt.Options{{kept, raftLogBoltOptions()}, {raftLogBoltOptions(), kept}} {
		path := filepath.Join(t.TempDir(), "raft.db")
		s, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: order[0]})
		if err != nil {
			t.Fatal(err)
		}
		const n, deleted = 3000, 2000
		for i := uint64(1); i <= n; i += 100 {
			var batch []*raft.Log
			for j := i; j < i+100; j++ {
				batch = append(batch, &raft.Log{Index: j, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(j)}, 200)})
			}
			if err := s.StoreLogs(batch); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.DeleteRange(1, deleted); err != nil { // frees most pages
			t.Fatal(err)
		}
		if err := s.SetUint64([]byte("CurrentTerm"), 9); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		s, err = raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: order[1]})
		if err != nil {
			t.Fatalf("open a log written with %+v using %+v: %v", *order[0], *order[1], err)
		}
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		if first != deleted+1 || last != n {
			t.Fatalf("reopened log holds %d..%d, want %d..%d", first, last, deleted+1, n)
		}
		for i := first; i <= last; i++ {
			var l raft.Log
			if err := s.GetLog(i, &l); err != nil || l.Index != i || !bytes.Equal(l.Data, bytes.Repeat([]byte{byte(i)}, 200)) {
				t.Fatalf("entry %d after reopening: %+v, %v", i, l, err)
			}
		}
		if term, err := s.GetUint64([]byte("CurrentTerm")); err != nil || term != 9 {
			t.Fatalf("CurrentTerm %d (%v), want 9", term, err)
		}
		// Appends reuse the freed pages the reopened file found.
		for i := uint64(n + 1); i <= n+500; i++ {
			if err := s.StoreLog(&raft.Log{Index: i, Term: 2, Data: []byte(fmt.Sprint(i))}); err != nil {
				t.Fatal(err)
			}
		}
		if last, _ := s.LastIndex(); last != n+500 {
			t.Fatalf("last index %d after appends, want %d", last, n+500)
		}
		s.Close()
	}
}

// BenchmarkRaftLogAppend measures one append of a small entry (an fsync'd
// bbolt commit) to a log whose head was deleted as after a snapshot,
// with the free-page list written on every commit (bbolt's default) and
// without it (raftLogBoltOptions). Reports the bytes written per append.
func BenchmarkRaftLogAppend(b *testing.B) {
	for _, c := range []struct {
		name string
		opts *bbolt.Options
	}{{"freelist-written", &bbolt.Options{}}, {"freelist-not-written", raftLogBoltOptions()}} {
		b.Run(c.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "raft.db")
			s, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: c.opts})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			// A log as a replica keeps it: 18,000 entries of a few hundred
			// bytes, then the oldest 8,000 deleted by a snapshot.
			const kept, deleted = 10_000, 8_000
			next := uint64(1)
			for next <= kept+deleted {
				var batch []*raft.Log
				for range 100 {
					batch = append(batch, &raft.Log{Index: next, Term: 1, Data: bytes.Repeat([]byte{1}, 300)})
					next++
				}
				if err := s.StoreLogs(batch); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.DeleteRange(1, deleted); err != nil {
				b.Fatal(err)
			}
			written := func() int64 {
				io, err := os.ReadFile("/proc/self/io")
				if err != nil {
					return 0
				}
				for _, line := range strings.Split(string(io), "\n") {
					if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
						n, _ := strconv.ParseInt(v, 10, 64)
						return n
					}
				}
				return 0
			}
			before := written()
			b.ResetTimer()
			for range b.N {
				if err := s.StoreLog(&raft.Log{Index: next, Term: 1, Data: bytes.Repeat([]byte{1}, 300)}); err != nil {
					b.Fatal(err)
				}
				next++
			}
			b.StopTimer()
			b.ReportMetric(float64(written()-before)/float64(b.N), "disk-B/op")
		})
	}
}
