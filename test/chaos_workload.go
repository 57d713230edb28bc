package test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"time"

	"herd/api"
	"herd/fsm"

	"github.com/anishathalye/porcupine"
)

// taskInput and taskOutput are one client operation on one task, as the
// linearizability checker sees it; operations are partitioned by key.
type taskInput struct {
	Kind string // submit, get, cancel
	Key  string
}

type taskOutput struct {
	Unknown  bool
	Found    bool   // get/cancel: the task exists
	Rejected bool   // cancel: 409, the task had already ended another way
	State    string // get/cancel: the state returned
	Index    uint64 // get/cancel: the task's modify index
}

func (ch *chaos) clientsFor(name string) []*api.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = ch.net.Dialer(name)
	var out []*api.Client
	for _, r := range ch.c.Replicas {
		cl, err := api.NewClient(r.Cfg.HTTPAddr)
		if err != nil {
			ch.t.Fatal(err)
		}
		ch.c.Secure(cl, tr, 3*time.Second)
		out = append(out, cl)
	}
	return out
}

var chaosCommands = [][]string{
	{"true"}, {"true"}, {"sleep", "0.2"}, {"sleep", "1"}, {"sh", "-c", "exit 3"},
}

// client submits, reads (consistent) and cancels tasks through random
// replicas, recording every operation; a failure that is not a clear 4xx
// answer is an unknown outcome.
func (ch *chaos) client(ctx context.Context, id int) {
	name := fmt.Sprintf("c%d", id+1)
	cls := ch.clientsFor(name)
	rng := rand.New(rand.NewPCG(ch.cfg.Seed, uint64(100+id)))
	var keys []string
	// A submit that failed is retried, same key and spec, up to 3 times
	// before the client moves on, as a real client would.
	var retry *api.TaskSpec
	retries := 0
	for n := 0; ctx.Err() == nil; n++ {
		cl := cls[rng.IntN(len(cls))]
		opCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		p := rng.IntN(100)
		if retry != nil {
			p = 0
		}
		switch {
		case p < 45 || len(keys) == 0:
			var spec api.TaskSpec
			if retry != nil {
				spec = *retry
			} else {
				key := fmt.Sprintf("%s-%d-%d", name, ch.cfg.Seed, n)
				if len(keys) > 0 && rng.IntN(10) == 0 {
					key = keys[rng.IntN(len(keys))] // an old submit sent again
				} else {
					keys = append(keys, key)
				}
				spec = api.TaskSpec{
					IdempotencyKey: key, Command: chaosCommands[rng.IntN(len(chaosCommands))], Submitter: name,
					Resources:   api.Resources{CPUMillis: 500, MemoryMB: 64},
					MaxAttempts: ptr(2), TimeoutSeconds: ptr(int64(20)),
					// The in-process agents, whose records show every run:
					// the process agent's slots are the ticker tasks'.
					RequiredLabels: map[string]string{"process": "no"},
				}
			}
			key := spec.IdempotencyKey
			retry = nil
			call := ch.now()
			resp, _, err := cl.SubmitTask(opCtx, spec)
			out := taskOutput{}
			if err != nil && !isClientError(err) && retries < 3 {
				retry, retries = &spec, retries+1
			} else {
				retries = 0
			}
			switch {
			case err == nil:
				ch.mu.Lock()
				if prev, ok := ch.acked[key]; ok && prev != resp.ID {
					ch.anomalies[CheckIdempotency] = append(ch.anomalies[CheckIdempotency], fmt.Sprintf("key %s acknowledged as %s and %s", key, prev, resp.ID))
				}
				ch.acked[key] = resp.ID
				ch.mu.Unlock()
			case isClientError(err) || notApplied(err):
				cancel()
				time.Sleep(20 * time.Millisecond)
				continue // a definite refusal, or never sent: not recorded
			default:
				out.Unknown = true
				ch.mu.Lock()
				ch.unknownKey[key] = true
				ch.mu.Unlock()
			}
			ch.record(id, taskInput{"submit", key}, out, call)
		default:
			key := keys[rng.IntN(len(keys))]
			taskID, ok := ch.taskID(key)
			if !ok {
				cancel()
				continue
			}
			call := ch.now()
			kind, out, answered := "get", taskOutput{}, false
			if p < 85 {
				task, _, err := cl.GetTask(opCtx, taskID, api.ReadOptions{Consistent: true})
				out, answered = readOutput(task, err)
			} else {
				kind = "cancel"
				task, err := cl.CancelTask(opCtx, taskID, "chaos")
				out, answered = cancelOutput(task, err)
			}
			if !answered {
				cancel()
				continue
			}
			ch.record(id, taskInput{kind, key}, out, call)
		}
		cancel()
		time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
	}
}

func ptr[T any](v T) *T { return &v }

// readOutput turns a consistent read's answer into a history output; false
// means the read did not answer, which says nothing.
func readOutput(task api.Task, err error) (taskOutput, bool) {
	switch {
	case err == nil:
		return taskOutput{Found: true, State: task.State, Index: task.ModifyIndex}, true
	case isNotFound(err):
		return taskOutput{}, true
	}
	return taskOutput{}, false
}

// cancelOutput does the same for a cancel. Unknown outcomes are left out:
// the model lets a read see CANCELLED without a recorded cancel anyway.
func cancelOutput(task api.Task, err error) (taskOutput, bool) {
	if isConflict(err) {
		return taskOutput{Found: true, Rejected: true}, true
	}
	return readOutput(task, err)
}

func (ch *chaos) taskID(key string) (string, bool) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	id, ok := ch.acked[key]
	return id, ok
}

func (ch *chaos) record(client int, in taskInput, out taskOutput, call int64) {
	ret := ch.now()
	if out.Unknown {
		ret = math.MaxInt64 // may take effect at any time after the call
	}
	ch.mu.Lock()
	ch.history = append(ch.history, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
	ch.mu.Unlock()
}

func statusOf(err error) int {
	var se *api.StatusError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

func isClientError(err error) bool {
	c := statusOf(err)
	return c >= 400 && c < 500 && c != http.StatusRequestTimeout && c != http.StatusTooManyRequests
}

// notApplied reports an error that proves the request had no effect: it
// was never sent, or the server said so.
func notApplied(err error) bool {
	var se *api.StatusError
	if errors.As(err, &se) {
		return se.Reason == api.CodeNotApplied
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func isNotFound(err error) bool { return statusOf(err) == http.StatusNotFound }

func isConflict(err error) bool { return statusOf(err) == http.StatusConflict }

// operator drains a random node for a while and makes it eligible again.
func (ch *chaos) operator(ctx context.Context) {
	cls := ch.clientsFor("op")
	rng := rand.New(rand.NewPCG(ch.cfg.Seed, 3))
	for ctx.Err() == nil {
		node := ch.agentCfgs[rng.IntN(len(ch.agentCfgs))].ID
		ch.setDrain(ctx, cls, node, true)
		sleepCtx(ctx, time.Duration(300+rng.IntN(700))*time.Millisecond)
		ch.setDrain(context.Background(), cls, node, false)
		sleepCtx(ctx, time.Duration(500+rng.IntN(1500))*time.Millisecond)
	}
}

func (ch *chaos) setDrain(ctx context.Context, cls []*api.Client, node string, drain bool) {
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		opCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := cls[i%len(cls)].DrainNode(opCtx, node, drain)
		cancel()
		if err == nil || isClientError(err) || (drain && ctx.Err() != nil) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// zombie replays completions for attempts that already ended, claiming
// another outcome, as an agent back from a long pause would: every one
// must be refused.
func (ch *chaos) zombie(ctx context.Context) {
	cls := ch.clientsFor("zombie")
	rng := rand.New(rand.NewPCG(ch.cfg.Seed, 4))
	for ctx.Err() == nil {
		sleepCtx(ctx, time.Duration(100+rng.IntN(300))*time.Millisecond)
		srv := ch.c.Server(rng.IntN(len(ch.c.Replicas)))
		if srv == nil {
			continue
		}
		st := srv.FSM().State()
		var ended []*fsm.Attempt
		for _, s := range []fsm.AttemptState{fsm.AttemptSucceeded, fsm.AttemptFailed, fsm.AttemptLost, fsm.AttemptCancelled, fsm.AttemptTimedOut} {
			as, err := st.AttemptsInState(s)
			if err == nil {
				ended = append(ended, as...)
			}
		}
		if len(ended) == 0 {
			continue
		}
		a := ended[rng.IntN(len(ended))]
		rp := replay{attemptID: a.ID, lease: a.LeaseVersion, claimed: fsm.AttemptSucceeded, before: a.State}
		req := api.AttemptCompleteRequest{LeaseVersion: a.LeaseVersion, ExitCode: 0, State: string(fsm.AttemptSucceeded)}
		if a.State == fsm.AttemptSucceeded {
			rp.claimed, req.State, req.ExitCode = fsm.AttemptFailed, string(fsm.AttemptFailed), 9
		}
		if rng.IntN(3) == 0 && a.LeaseVersion > 1 {
			rp.lease--
			req.LeaseVersion--
		}
		opCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		rep, err := cls[rng.IntN(len(cls))].CompleteAttempt(opCtx, a.ID, req)
		cancel()
		if err == nil {
			rp.accepted, rp.duplicate = true, rep.Duplicate
		}
		ch.mu.Lock()
		ch.replays = append(ch.replays, rp)
		ch.mu.Unlock()
	}
}

// --- faults ---------------------------------------------------------------
