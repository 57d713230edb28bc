package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"herd/config"
)

// TestWALOnAFullDisk pins down how the wal log store meets a full disk,
// as README ("Configuration") describes it: appends go on into the
// preallocated segment; once it is full and the next cannot be started
// they fail, and keep failing after space is back until the store is
// opened again; reopened, it holds every entry it acknowledged and
// appends again.
func TestWALOnAFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small filesystem needs root")
	}
	disk := t.TempDir()
	if err := syscall.Mount("tmpfs", disk, "tmpfs", 0, "size=24m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(disk, syscall.MNT_DETACH) })
	dir := filepath.Join(disk, "raft")
	logger := hclog.NewNullLogger()
	s, err := openLogStore(dir, config.LogStoreWAL, logger)
	if err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(disk, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()

	data := make([]byte, 32<<10)
	var acked uint64
	var failed error
	for i := uint64(1); i <= 2*walSegmentBytes/uint64(len(data)); i++ {
		if err := s.StoreLogs([]*raft.Log{{Index: i, Term: 1, Data: data}}); err != nil {
			failed = err
			break
		}
		acked = i
	}
	if failed == nil {
		t.Fatal("two segments' worth of appends all succeeded on a full disk")
	}
	if acked < walSegmentBytes/uint64(len(data))/2 {
		t.Fatalf("appends failed after %d entries, before the preallocated segment was used", acked)
	}
	t.Logf("on a full disk: %d entries acknowledged, then %v", acked, failed)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs([]*raft.Log{{Index: acked + 1, Term: 1, Data: data}}); err == nil {
		t.Fatal("an append succeeded with space back before a reopen: raft-wal now recovers by itself, and README and config.LogStoreWAL should say so")
	} else {
		t.Logf("with space back, before a reopen: %v", err)
	}
	s.Close()

	s, err = openLogStore(dir, config.LogStoreWAL, logger)
	if err != nil {
		t.Fatalf("reopen with space back: %v", err)
	}
	defer s.Close()
	last, err := s.LastIndex()
	if err != nil || last < acked {
		t.Fatalf("reopened log ends at %d (%v), %d entries were acknowledged", last, err, acked)
	}
	for i := uint64(1); i <= acked; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil || len(l.Data) != len(data) {
			t.Fatalf("acknowledged entry %d: %v", i, err)
		}
	}
	if err := s.StoreLogs([]*raft.Log{{Index: last + 1, Term: 1, Data: []byte(fmt.Sprint(last + 1))}}); err != nil {
		t.Fatalf("append after the reopen: %v", err)
	}
}
