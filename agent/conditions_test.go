package agent

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"herd/api"
)

// The disk condition follows the data directory's free space and inodes,
// and a write that failed for want of space raises it until a write
// works again. While it stands, an attempt fails before it starts, with
// the reason.
func TestDiskConditionFollowsTheDataDirectory(t *testing.T) {
	a := agentForTest(t, "none", func() (limiter, error) { return noLimits{}, nil })
	var freeBytes, freeInodes uint64 = 1 << 30, 1 << 20
	a.conditions.space = func(string) (uint64, uint64, bool) { return freeBytes, freeInodes, true }

	if got := a.conditions.check(); len(got) != 0 {
		t.Fatalf("conditions with 1 GiB free: %+v", got)
	}
	freeBytes = 3 << 20
	got := a.conditions.check()
	if len(got) != 1 || got[0].Type != api.ConditionDiskFull || !strings.Contains(got[0].Message, "3 MiB free") {
		t.Fatalf("conditions with 3 MiB free: %+v", got)
	}
	out := a.runProcess(context.Background(), assignment("RESERVED", "true"))
	if out.state != api.AttemptFailed || !strings.Contains(out.err, "no space left for working directories and logs") {
		t.Fatalf("an attempt on a full disk: %+v", out)
	}
	freeBytes, freeInodes = 1<<30, 10
	if got := a.conditions.check(); len(got) != 1 || !strings.Contains(got[0].Message, "10 inodes free") {
		t.Fatalf("conditions with 10 inodes free: %+v", got)
	}
	freeInodes = 1 << 20
	// The failed attempt above noted the full disk; with space back, a
	// probe write clears it.
	if got := a.conditions.check(); len(got) != 0 {
		t.Fatalf("conditions once space returned: %+v", got)
	}

	// A write that failed for want of space with space reported (a quota)
	// stands until a write succeeds: here the directory cannot be written
	// at all, so it stands.
	a.conditions.noteWrite(&writeErr{syscall.ENOSPC})
	dataDir := a.cfg.DataDir
	a.cfg.DataDir = t.TempDir() + "/missing"
	if got := a.conditions.check(); len(got) != 1 || !strings.Contains(got[0].Message, "no space left on device") {
		t.Fatalf("conditions after a failed write: %+v", got)
	}
	a.cfg.DataDir = dataDir
	if got := a.conditions.check(); len(got) != 0 {
		t.Fatalf("conditions once a write works: %+v", got)
	}
	if out := a.runProcess(context.Background(), assignment("RESERVED", "true")); out.state != api.AttemptSucceeded {
		t.Fatalf("an attempt once space returned: %+v", out)
	}
}

type writeErr struct{ errno syscall.Errno }

func (e *writeErr) Error() string { return "write log: " + e.errno.Error() }
func (e *writeErr) Unwrap() error { return e.errno }
