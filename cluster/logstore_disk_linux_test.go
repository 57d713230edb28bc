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

// TestWALOnAFullDisk: the wal log store on a full disk appends into its
// preallocated segment, then refuses appends; once space is back the
// next append succeeds, and the log, reopened, holds every entry it
// acknowledged and takes more. The disk has room for two segments once
// the filler is gone.
func TestWALOnAFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small filesystem needs root")
	}
	disk := t.TempDir()
	if err := syscall.Mount("tmpfs", disk, "tmpfs", 0, "size=48m"); err != nil {
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
	t.Logf("on a full disk: %d entries acknowledged, then %v", acked, failed)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// With space back the next append succeeds: the store opens the WAL
	// again underneath (raft-wal alone would refuse until reopened).
	if err := s.StoreLogs([]*raft.Log{{Index: acked + 1, Term: 1, Data: data}}); err != nil {
		t.Fatalf("an append with space back: %v", err)
	}
	acked++
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
