package bench

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"herd/api"
	"herd/test/localcluster"
)

// benchFailover stops the leader under a steady write load and measures
// the time to the first write acknowledged after the stop: the leader
// lost without a word (failover_p50_ms, failover_p99_ms) and stopped
// with a handover (failover_handover_*).
func benchFailover(dir string, sz benchSizes, r *Result) error {
	c, err := startCluster(dir, "")
	if err != nil {
		return err
	}
	defer c.Shutdown()
	// The load: writers submitting through every replica at a steady
	// pace for the whole step, so the leader dies with entries in flight.
	load, stopLoad := context.WithCancel(context.Background())
	var (
		writers sync.WaitGroup
		acked   atomic.Int64
	)
	defer func() { stopLoad(); writers.Wait() }()
	if err := startFailoverLoad(load, c.HTTPAddrs(), &writers, &acked); err != nil {
		return err
	}
	// Trials alternate: the leader halted (it vanishes, as when it
	// crashes: the followers elect a new one after their heartbeat
	// timeout) and stopped (SIGTERM: it hands its leadership over first).
	var times, handedOver, rates []float64
	for trial := 0; trial < 2*sz.failoverTrials; trial++ {
		halt := trial%2 == 0
		// The leader dies with the load flowing: first the load gets
		// failoverLoadSettle more writes acknowledged.
		from, t0 := acked.Load(), time.Now()
		for acked.Load() < from+failoverLoadSettle {
			if time.Since(t0) > 30*time.Second {
				return fmt.Errorf("trial %d: the load got %d of %d writes acknowledged in 30 s", trial, acked.Load()-from, failoverLoadSettle)
			}
			time.Sleep(5 * time.Millisecond)
		}
		rates = append(rates, float64(acked.Load()-from)/time.Since(t0).Seconds())
		took, extra, err := failoverTrial(c, trial, halt)
		if err != nil {
			return fmt.Errorf("trial %d: %w", trial, err)
		}
		if halt {
			times, r.FailoverExtraElections = append(times, took), r.FailoverExtraElections+extra
		} else {
			handedOver = append(handedOver, took)
		}
	}
	r.FailoverP50, r.FailoverP99 = percentile(times, 0.5), percentile(times, 0.99)
	r.FailoverHandOverP50, r.FailoverHandOverP99 = percentile(handedOver, 0.5), percentile(handedOver, 0.99)
	r.FailoverLoadPerSec = percentile(rates, 0.5)
	return nil
}

// startFailoverLoad starts the writers, each submitting one task per
// interval through the replicas until load ends; acked counts the
// acknowledged writes.
func startFailoverLoad(load context.Context, addrs []string, writers *sync.WaitGroup, acked *atomic.Int64) error {
	for w := range failoverLoadWriters {
		cl, err := api.NewClient(addrs[w%3], addrs[(w+1)%3], addrs[(w+2)%3])
		if err != nil {
			return err
		}
		cl.Retries, cl.RetryWait = 0, 0 // a write lost to the failover is the load's loss, not retried
		writers.Add(1)
		go func() {
			defer writers.Done()
			tick := time.NewTicker(failoverLoadEvery)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-load.Done():
					return
				case <-tick.C:
				}
				if _, _, err := cl.SubmitTask(load, api.TaskSpec{Name: "load", IdempotencyKey: fmt.Sprintf("failover-load-%d-%d", w, i), Command: []string{"true"}}); err == nil {
					acked.Add(1)
				}
			}
		}()
	}
	return nil
}

// failoverTrial halts (or, unless halt, stops) the leader and measures
// how long a write through the other replicas takes to be acknowledged,
// in milliseconds; after a halt, extra counts the elections past the
// first it took. The old leader is started again from its data
// directory before it returns.
func failoverTrial(c *localcluster.Cluster, trial int, halt bool) (took float64, extra int, err error) {
	old, err := leader(c)
	if err != nil {
		return 0, 0, err
	}
	idx := -1
	var live []string
	for i := range c.Len() {
		if c.Server(i) == old {
			idx = i
		} else {
			live = append(live, c.Config(i).HTTPAddr)
		}
	}
	cl, _ := api.NewClient(live...)
	cl.Retries, cl.RetryWait = 1000, 20*time.Millisecond
	cl.SetHTTPClient(&http.Client{Timeout: 5 * time.Second})
	term := old.Raft().CurrentTerm()
	stopped := time.Now()
	if halt {
		_ = c.HaltReplica(idx)
	} else {
		_ = c.StopReplica(idx)
	}
	if _, _, err := cl.SubmitTask(context.Background(), api.TaskSpec{Name: "f", IdempotencyKey: fmt.Sprint("failover-", trial), Command: []string{"true"}}); err != nil {
		return 0, 0, err
	}
	took = float64(time.Since(stopped).Microseconds()) / 1000
	if halt {
		// Each election a candidate holds takes a new term (a failed
		// pre-vote round does not): growth past one is a split vote or a
		// lost election.
		next, err := leader(c)
		if err != nil {
			return 0, 0, err
		}
		if grew := next.Raft().CurrentTerm() - term; grew > 1 {
			extra = int(grew - 1)
		}
	}
	// Bring the old leader back from its data dir before the next trial.
	if err := c.StartReplica(idx); err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return took, extra, c.WaitForLeader(ctx)
}

// The failover step's load: this many writers, each submitting one task
// per interval through the replicas (about 500 writes a second offered),
// and how many of its writes each leader acknowledges before it is killed.
const (
	failoverLoadWriters = 8
	failoverLoadEvery   = 16 * time.Millisecond
	failoverLoadSettle  = 100
)
