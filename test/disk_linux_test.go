package test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"herd/agent"
	"herd/api"
	"herd/config"
)

// smallDisk mounts a tmpfs of size MiB at a new directory, for the test's
// life; it skips the test where that is not allowed (not root).
func smallDisk(t *testing.T, mib int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small filesystem needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%dm", mib)); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// fill writes a file into dir until the filesystem is full, and returns
// its path (removing it gives the space back).
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			return path
		}
	}
}

// A replica whose data directory fills up refuses writes with a clear
// 503 and loses nothing it acknowledged; when space comes back it serves
// writes again on its own, and a restart finds every acknowledged task.
func TestFullDiskRefusesWritesAndRecovers(t *testing.T) {
	disk := smallDisk(t, 24)
	onDisk := func(cfg *config.Server) { cfg.DataDir = filepath.Join(disk, cfg.ID) }
	c := NewClusterWith(t, 1, Setup{Config: []ClusterOption{onDisk}})
	cl := c.Client(0)
	cl.Retries = 0
	ctx := Ctx(t, 2*time.Minute)
	var acked []string
	submitOne := func(key string) error {
		res, _, err := cl.SubmitTask(ctx, api.TaskSpec{Name: key, IdempotencyKey: key, Command: []string{"true"}})
		if err == nil {
			acked = append(acked, res.ID)
		}
		return err
	}
	for i := range 20 {
		if err := submitOne(fmt.Sprint("before-", i)); err != nil {
			t.Fatalf("submit before the disk filled: %v", err)
		}
	}
	filler := fill(t, disk)
	var refused error
	for i := 0; i < 200 && refused == nil; i++ {
		refused = submitOne(fmt.Sprint("full-", i))
	}
	var se *api.StatusError
	if !errors.As(refused, &se) || se.Code != 503 || !strings.Contains(se.Message, "no space left") {
		t.Fatalf("a write to a replica with a full disk: %v, want a 503 that says no space is left", refused)
	}
	t.Logf("refused: %v", refused)
	// Reads still work, and everything acknowledged is there.
	for _, id := range acked {
		if _, _, err := cl.GetTask(ctx, id, api.ReadOptions{}); err != nil {
			t.Fatalf("acknowledged task %s unreadable on a full disk: %v", id, err)
		}
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// With space back, writes are accepted again without any repair.
	if !Eventually(time.Minute, func() bool { return submitOne(fmt.Sprint("after-", len(acked))) == nil }) {
		t.Fatal("writes still refused after space came back")
	}
	c.Stop(0)
	c.Start(0)
	c.WaitForLeader()
	cl = c.Client(0)
	cl.Retries, cl.RetryWait = 40, 250*time.Millisecond
	for _, id := range acked {
		if _, _, err := cl.GetTask(ctx, id, api.ReadOptions{Consistent: true}); err != nil {
			t.Fatalf("acknowledged task %s lost across the restart: %v", id, err)
		}
	}
}

// In a three-replica cluster one replica's full disk costs nothing the
// cluster acknowledges: the other two commit, and once the space is back
// the full one catches up and serves every acknowledged task, with no
// repair.
func TestFullDiskOfOneReplicaAndCatchUp(t *testing.T) {
	disk := smallDisk(t, 24)
	onDisk := func(cfg *config.Server) {
		if cfg.ID == "s3" {
			cfg.DataDir = filepath.Join(disk, cfg.ID)
		}
	}
	c := NewClusterWith(t, 3, Setup{Config: []ClusterOption{onDisk}})
	cl := c.AllClient()
	ctx := Ctx(t, 3*time.Minute)
	filler := fill(t, disk)
	var acked []string
	for i := range 60 {
		res, _, err := cl.SubmitTask(ctx, api.TaskSpec{Name: "t", IdempotencyKey: fmt.Sprint("k-", i), Command: []string{"true"}})
		if err != nil {
			t.Fatalf("submit %d with one replica's disk full: %v", i, err)
		}
		acked = append(acked, res.ID)
	}
	s3 := c.Client(2)
	if _, _, err := s3.GetTask(ctx, acked[len(acked)-1], api.ReadOptions{}); err == nil {
		t.Fatal("s3 holds the last task though its disk is full: the fault did not take")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for _, id := range acked {
		if !Eventually(time.Minute, func() bool { _, _, err := s3.GetTask(ctx, id, api.ReadOptions{}); return err == nil }) {
			t.Fatalf("s3 never caught up to acknowledged task %s after its disk had room again", id)
		}
	}
}

// An agent whose data directory fills up keeps the result of the attempt
// that ran into it, says why in its node status, keeps heartbeating (it
// stays READY, so nothing it runs is lost), takes no new attempt while
// the disk is full (the explanation names the condition), and takes work
// again on its own once space returns.
func TestAgentFullDiskSaysWhyAndRecovers(t *testing.T) {
	disk := smallDisk(t, 16)
	c := NewCluster(t, 1)
	ag := c.StartAgent(agent.Config{ID: "edge", DataDir: disk, MinFreeDiskMB: 4, Slots: 2, Labels: map[string]string{"role": "edge"}})
	WaitRegistered(t, ag)
	cl := c.Client(0)
	gate := filepath.Join(t.TempDir(), "go")

	writer := shSpec("writer", fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done; echo written-once-the-disk-was-full", gate))
	writerID := submit(t, cl, writer)
	waitTaskState(t, cl, writerID, api.TaskRunning)
	filler := fill(t, disk)
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Its output could not be logged; the result still goes, with the tail.
	task := waitTaskState(t, cl, writerID, api.TaskSucceeded)
	if !strings.Contains(task.Attempts[0].OutputTail, "written-once") || !timelineSays(task, "no space left for the log") {
		t.Fatalf("the attempt that ran into the full disk: %+v", task)
	}

	var cond api.NodeCondition
	if !Eventually(30*time.Second, func() bool {
		n := node(t, cl, "edge")
		if len(n.Conditions) == 1 {
			cond = n.Conditions[0]
		}
		return cond.Type == api.ConditionDiskFull
	}) {
		t.Fatalf("the node never reported its full disk: %+v", node(t, cl, "edge"))
	}
	if !strings.Contains(cond.Message, "no space left for working directories and logs") || cond.Since.IsZero() {
		t.Fatalf("condition: %+v", cond)
	}

	waiting := shSpec("waiting", "true")
	waiting.RequiredLabels = map[string]string{"role": "edge"}
	waitingID := submit(t, cl, waiting)
	// Several heartbeat intervals: the node stays READY and the task waits,
	// explained by the condition.
	hb := ag.Agent.Config().HeartbeatInterval
	for deadline := time.Now().Add(10 * hb); time.Now().Before(deadline); time.Sleep(hb / 2) {
		if n := node(t, cl, "edge"); n.Liveness != api.LivenessReady {
			t.Fatalf("with a full disk the node is %s: %+v", n.Liveness, n.Events)
		}
		if tk, _, err := cl.GetTask(context.Background(), waitingID, api.ReadOptions{Consistent: true}); err != nil || tk.State != api.TaskPending {
			t.Fatalf("with a full disk the waiting task is %s (%v)", tk.State, err)
		}
	}
	ex, err := cl.ExplainTask(context.Background(), waitingID, api.ReadOptions{})
	if err != nil || len(ex.Nodes) != 1 || !strings.Contains(strings.Join(ex.Nodes[0].Reasons, " "), "disk_full") {
		t.Fatalf("explanation of the waiting task: %+v (%v)", ex, err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitTaskState(t, cl, waitingID, api.TaskSucceeded)
	n := node(t, cl, "edge")
	if len(n.Conditions) != 0 || !slices.ContainsFunc(n.Events, func(e api.TimelineEvent) bool { return e.Message == "disk_full cleared" }) {
		t.Fatalf("after space returned: conditions %+v, events %+v", n.Conditions, n.Events)
	}
}
