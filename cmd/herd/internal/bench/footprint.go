package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"herd/api"
	"herd/test/localcluster"
)

// benchFootprint runs one replica as its own process, loads it through
// the API, and reads its resident memory, snapshot and restart time; then
// loads a fresh replica the same way under memory_limit_mib, to show what
// the soft limit saves and what it costs in load rate.
func benchFootprint(exe, dir string, sz benchSizes, heapProfile string, r *Result) error {
	ctx := context.Background()
	rep, err := startFootprintReplica(exe, dir, heapProfile != "")
	if err != nil {
		return err
	}
	defer rep.stop()
	if r.FootprintLoadPerSec, err = loadFootprint(ctx, rep.cl, sz); err != nil {
		return err
	}
	pid := rep.cmd.Process.Pid
	r.ReplicaRSSMiB, r.ReplicaAnonMiB, r.ReplicaFileMiB = procRSSMiB(pid, "VmRSS"), procRSSMiB(pid, "RssAnon"), procRSSMiB(pid, "RssFile")
	r.ReplicaHeapMiB = heapFromStats(ctx, rep.cl)
	// After a settling time as long as the window: the load's tail (a
	// snapshot, log compaction, collection) is not the backlog's cost.
	time.Sleep(sz.footIdle)
	cpu0, t0 := procCPUSeconds(pid), time.Now()
	time.Sleep(sz.footIdle)
	r.ReplicaIdleCPUPercent = 100 * (procCPUSeconds(pid) - cpu0) / time.Since(t0).Seconds()
	r.ReplicaSettledRSSMiB, r.ReplicaPeakRSSMiB = procRSSMiB(pid, "VmRSS"), procRSSMiB(pid, "VmHWM")
	r.FootprintIdle = sz.footIdle.String()
	if heapProfile != "" {
		if err := saveProfile(ctx, rep.httpAddr, "heap", heapProfile); err != nil {
			return err
		}
	}
	t0 = time.Now()
	var archive bytes.Buffer
	if err := rep.cl.SnapshotSave(ctx, &archive); err != nil {
		return err
	}
	r.SnapshotSaveMs = float64(time.Since(t0).Microseconds()) / 1000
	r.SnapshotBytes = int64(archive.Len())
	t0 = time.Now()
	if err := rep.cl.SnapshotRestore(ctx, &archive); err != nil {
		return fmt.Errorf("restore the footprint snapshot: %w", err)
	}
	r.SnapshotRestoreMs = float64(time.Since(t0).Microseconds()) / 1000
	rep.stop()
	t0 = time.Now()
	if err := rep.start(); err != nil {
		return err
	}
	if err := waitReady(ctx, rep.cl, 5*time.Minute); err != nil {
		return err
	}
	for {
		list, _, err := rep.cl.ListTasks(ctx, api.TaskQuery{Limit: 1}, api.ReadOptions{Consistent: true})
		if err == nil && len(list.Tasks) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.RestartToReadyMs = float64(time.Since(t0).Microseconds()) / 1000
	rep.stop()

	// The same load into a fresh replica under a soft memory limit: the
	// collector trades CPU for footprint.
	limited, err := startFootprintReplica(exe, dir+"-limited", false, "-memory-limit-mib", strconv.Itoa(benchMemoryLimitMiB))
	if err != nil {
		return err
	}
	defer limited.stop()
	if r.LimitedLoadPerSec, err = loadFootprint(ctx, limited.cl, sz); err != nil {
		return err
	}
	pid = limited.cmd.Process.Pid
	r.LimitedRSSMiB, r.LimitedAnonMiB = procRSSMiB(pid, "VmRSS"), procRSSMiB(pid, "RssAnon")
	return nil
}

// footprintReplica is a single-replica cluster run as its own process.
type footprintReplica struct {
	exe      string // the herd binary
	args     []string
	httpAddr string
	cl       *api.Client
	cmd      *exec.Cmd
}

// startFootprintReplica starts a replica on dir (bootstrapping it the
// first time) and waits until it serves.
func startFootprintReplica(exe, dir string, debugEndpoints bool, extra ...string) (*footprintReplica, error) {
	httpAddr, err := localcluster.FreeAddr()
	if err != nil {
		return nil, err
	}
	raftAddr, err := localcluster.FreeAddr()
	if err != nil {
		return nil, err
	}
	rep := &footprintReplica{
		exe:      exe,
		httpAddr: httpAddr,
		args: append([]string{"server", "-id", "bench", "-data-dir", dir, "-http-addr", httpAddr, "-raft-addr", raftAddr, "-bootstrap", "-log-level", "error",
			fmt.Sprintf("-enable-debug=%t", debugEndpoints)}, extra...),
	}
	rep.cl, _ = api.NewClient(httpAddr)
	rep.cl.Retries, rep.cl.RetryWait = 100, 100*time.Millisecond
	if err := rep.start(); err != nil {
		return nil, err
	}
	if err := waitReady(context.Background(), rep.cl, 30*time.Second); err != nil {
		rep.stop()
		return nil, err
	}
	return rep, nil
}

func (rep *footprintReplica) start() error {
	rep.cmd = exec.Command(rep.exe, rep.args...)
	rep.cmd.Stdout, rep.cmd.Stderr = io.Discard, io.Discard
	return rep.cmd.Start()
}

// stop ends the replica as an operator would (SIGTERM) and waits, killing
// it if it has not stopped within 30 s; a stopped replica's stop does
// nothing.
func (rep *footprintReplica) stop() {
	if rep.cmd == nil {
		return
	}
	p := rep.cmd.Process
	rep.cmd = nil
	_ = p.Signal(syscall.SIGTERM)
	kill := time.AfterFunc(30*time.Second, func() { _ = p.Kill() })
	defer kill.Stop()
	_, _ = p.Wait()
}

// loadFootprint registers the nodes and submits the tasks one request
// each from 32 clients, and returns the submit rate.
func loadFootprint(ctx context.Context, cl *api.Client, sz benchSizes) (float64, error) {
	for i := 0; i < sz.footNodes; i++ {
		// Nodes are drained so the tasks stay PENDING: the backlog case.
		if _, err := cl.RegisterNode(ctx, api.NodeRegistration{NodeSpec: api.NodeSpec{ID: fmt.Sprintf("node-%04d", i), Capabilities: map[string][]string{"exec": {"1"}},
			Resources: api.Resources{CPUMillis: 4000, MemoryMB: 4096}, Slots: 4, Labels: map[string]string{"zone": fmt.Sprint("z", i%4)}}}); err != nil {
			return 0, err
		}
		if _, err := cl.DrainNode(ctx, fmt.Sprintf("node-%04d", i), true); err != nil {
			return 0, err
		}
	}
	t0 := time.Now()
	if err := submitConcurrently(ctx, cl, sz.footTasks, func(i int) api.TaskSpec {
		return api.TaskSpec{Name: fmt.Sprint("t", i), IdempotencyKey: fmt.Sprint("k", i), Command: []string{"sh", "-c", "echo hello"},
			Env: map[string]string{"K": "V"}, Resources: api.Resources{CPUMillis: 100, MemoryMB: 64}}
	}); err != nil {
		return 0, err
	}
	return float64(sz.footTasks) / time.Since(t0).Seconds(), nil
}

// benchMemoryLimitMiB is the soft limit the footprint step also measures.
const benchMemoryLimitMiB = 100

// saveProfile fetches one of a replica's profiles (it runs with
// -enable-debug) into path: "heap", or "profile?seconds=N" for its CPU
// over the next N seconds.
func saveProfile(ctx context.Context, httpAddr, which, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/debug/pprof/"+which, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fetch the %s profile: %w", which, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch the %s profile: %s", which, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("write the %s profile: %w", which, err)
	}
	return f.Close()
}
