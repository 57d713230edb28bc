package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"herd/api"
	"herd/cluster"
	"herd/config"
	"herd/fsm"
	"herd/test/localcluster"
)

// leader waits up to a minute for the cluster's leader.
func leader(c *localcluster.Cluster) (*cluster.Server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return c.Leader(ctx)
}

func applyChunks(ctx context.Context, s *cluster.Server, cmds [][]byte) error {
	for start := 0; start < len(cmds); start += 1000 {
		end := min(start+1000, len(cmds))
		if _, _, err := s.ApplyCommand(ctx, fsm.EncodeBatch(cmds[start:end])); err != nil {
			return err
		}
	}
	return nil
}

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(int(float64(len(s)-1)*p+0.5), len(s)-1)]
}

func waitReady(ctx context.Context, cl *api.Client, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, _, err := cl.ListTasks(ctx, api.TaskQuery{Limit: 1}, api.ReadOptions{Consistent: true}); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica not ready after %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// procRSSMiB reads a field of /proc/PID/status in MiB: VmRSS (all
// resident memory), RssAnon (heap and stacks) or RssFile (mapped files:
// the binary's pages, and with log_store = "boltdb" the raft log's).
func procRSSMiB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field+":" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// procCPUSeconds is the user and system CPU time process pid has used,
// from /proc/PID/stat (in the kernel's fixed 100 ticks per second).
func procCPUSeconds(pid int) float64 {
	// utime and stime are the 12th and 13th fields after the name.
	return procTicks(pid, 11, 12) / 100
}

// procStat is /proc/PID/stat's fields after the command name (which is
// in parentheses and may hold anything): the state first.
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

// procTicks sums the two clock-tick fields i and j of procStat.
func procTicks(pid, i, j int) float64 {
	f := procStat(pid)
	if len(f) <= max(i, j) {
		return 0
	}
	a, _ := strconv.ParseFloat(f[i], 64)
	b, _ := strconv.ParseFloat(f[j], 64)
	return a + b
}

// heapFromStats reads the replica's Go heap from its raft stats endpoint.
func heapFromStats(ctx context.Context, cl *api.Client) float64 {
	st, err := cl.RaftStats(ctx)
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseFloat(st["go_heap_inuse_bytes"], 64)
	return v / (1 << 20)
}

// startCluster starts a quiet three-replica cluster on loopback and
// waits until its leader writes the binary command forms (each server
// records that it reads them within a second or so of starting; JSON is
// written before).
//
// With pkiDir, the replicas run with TLS and ACLs, their certificates from
// a CA made there.
func startCluster(dir, pkiDir string, configure ...func(*config.Server)) (*localcluster.Cluster, error) {
	opts := localcluster.Options{PKIDir: pkiDir}
	store := os.Getenv(logStoreEnv)
	opts.Configure = func(cfg *config.Server) {
		if store != "" {
			cfg.Raft.LogStore = store
		}
		if len(configure) > 0 {
			configure[0](cfg)
		}
	}
	c, err := localcluster.StartLoopback(dir, "bench", 3, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Leader(ctx); err != nil {
		_ = c.Shutdown()
		return nil, fmt.Errorf("the bench cluster elected no leader in 30 s: %w", err)
	}
	return c, nil
}

// submitBatches submits tasks 0..n-1 in batches of size, four batches in
// flight.
func submitBatches(ctx context.Context, cl *api.Client, n, size int, spec func(i int) api.TaskSpec) error {
	return inChunks(n, size, 4, func(start, end int) error {
		specs := make([]api.TaskSpec, 0, end-start)
		for i := start; i < end; i++ {
			specs = append(specs, spec(i))
		}
		_, err := cl.SubmitTasks(ctx, specs)
		return err
	})
}

// submitConcurrently submits tasks 0..n-1 one request each, 32 in flight.
func submitConcurrently(ctx context.Context, cl *api.Client, n int, spec func(i int) api.TaskSpec) error {
	return inChunks(n, 1, 32, func(i, _ int) error {
		_, _, err := cl.SubmitTask(ctx, spec(i))
		return err
	})
}

// inChunks calls fn on [start, end) chunks of 0..n-1 from that many
// workers, and returns the first error (a worker stops at its error).
func inChunks(n, size, workers int, fn func(start, end int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				start := int(next.Add(int64(size))) - size
				if start >= n {
					return
				}
				if err := fn(start, min(start+size, n)); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return err
	}
	return nil
}

// mkdirs makes each directory named (an empty name is skipped).
func mkdirs(dirs ...string) error {
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}
