package fsm

import (
	"bytes"
	"testing"
	"time"

	"herd/scheduler"
)

// requireSameState fails the test unless the two harnesses' states are
// the same snapshot bytes, named want and have in the message.
func requireSameState(t *testing.T, want, have *harness, wantName, haveName string) {
	t.Helper()
	var w, h bytes.Buffer
	if err := want.f.State().Dump(&w); err != nil {
		t.Fatal(err)
	}
	if err := have.f.State().Dump(&h); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w.Bytes(), h.Bytes()) {
		t.Fatalf("the states differ:\n%s:\n%s\n%s:\n%s", wantName, w.String(), haveName, h.String())
	}
}

// An attempt-run command leaves the state exactly as its start and end as
// two commands in one entry do (what a leader writes while a server of
// the first release's forms remains), for an attempt that succeeds, one
// that fails, one whose lease is stale and one reclaimed before its
// report: the snapshots of the two states are the same bytes.
func TestAttemptRunIsItsStartAndEnd(t *testing.T) {
	res := scheduler.Resources{CPUMillis: 1000, MemoryMB: 512}
	for _, c := range []struct {
		name      string
		state     AttemptState
		exit      int
		staleBy   uint64 // added to the reported lease
		reclaimed bool
	}{
		{name: "succeeded", state: AttemptSucceeded},
		{name: "failed", state: AttemptFailed, exit: 3},
		{name: "stale lease", state: AttemptSucceeded, staleBy: 1},
		{name: "reclaimed first", state: AttemptSucceeded, reclaimed: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			setup := func() (*harness, *Attempt) {
				h := newHarness(t)
				h.register("n1", res, 2)
				h.submit("t1", res, 3)
				r := h.applyBatch(reserveCmd(t, "t1", "t1-1", "n1", 1, 1))[0].(*ReserveResult)
				if c.reclaimed {
					h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: "t1-1", LeaseVersion: r.Attempt.LeaseVersion, State: AttemptLost,
						Error: "never started", Now: epoch.Add(2 * time.Second), RetryAt: epoch.Add(3 * time.Second), OnlyReserved: true})
				}
				return h, r.Attempt
			}
			started, ended := epoch.Add(1500*time.Millisecond), epoch.Add(1700*time.Millisecond)
			endOf := func(a *Attempt) AttemptEndRequest {
				return AttemptEndRequest{AttemptID: a.ID, LeaseVersion: a.LeaseVersion + c.staleBy, State: c.state, ExitCode: c.exit,
					OutputTail: "out", Now: ended, RetryAt: ended.Add(time.Second)}
			}

			two, a := setup()
			pair := two.applyBatch(EncodeAttemptStart(AttemptStartRequest{AttemptID: a.ID, LeaseVersion: a.LeaseVersion + c.staleBy, Now: started}),
				EncodeAttemptEnd(endOf(a)))
			one, a := setup()
			got := one.apply(MsgAttemptRun, AttemptRunRequest{End: endOf(a), StartedAt: started})

			requireSameState(t, two, one, "two commands", "one command")
			// The run answers as the two did: the end's result or
			// refusal, the start's beside it.
			if endErr, refused := pair[1].(error); refused {
				if err, ok := got.(error); !ok || err.Error() != endErr.Error() {
					t.Fatalf("the run answered %v where the end was refused with %v", got, endErr)
				}
				return
			}
			run, ok := got.(*AttemptRunResult)
			if !ok || run.End == nil || run.End.Attempt.State != pair[1].(*AttemptResult).Attempt.State {
				t.Fatalf("the run answered %#v, the pair %#v", got, pair)
			}
			if _, startRefused := pair[0].(error); startRefused != (run.StartErr != nil) || startRefused == (run.Start != nil) {
				t.Fatalf("the run's start %v / %v, the pair's %v", run.Start, run.StartErr, pair[0])
			}
		})
	}
}

// An attempt-run round-trips through its binary form, and a truncated
// one is refused as malformed.
func TestAttemptRunCodec(t *testing.T) {
	r := AttemptRunRequest{End: AttemptEndRequest{AttemptID: "t1-1", LeaseVersion: 7, State: AttemptFailed, ExitCode: -2, OutputTail: "tail",
		Error: "killed", Now: epoch.Add(time.Second), RetryAt: epoch.Add(2 * time.Second), InputUnavailable: true}, StartedAt: epoch}
	enc := EncodeAttemptRun(r)
	h, payload, err := decodeHeader(enc)
	if err != nil || h.typ != MsgAttemptRun || h.version != FormsAttemptRun {
		t.Fatalf("header %+v, %v", h, err)
	}
	got, err := decodeAttemptRun(payload)
	if err != nil {
		t.Fatal(err)
	}
	if got.End.AttemptID != r.End.AttemptID || got.End.LeaseVersion != 7 || got.End.ExitCode != -2 || got.End.Error != "killed" ||
		!got.End.InputUnavailable || !got.StartedAt.Equal(epoch) || !got.End.RetryAt.Equal(r.End.RetryAt) {
		t.Fatalf("decoded %+v, want %+v", got, r)
	}
	if _, err := decodeAttemptRun(payload[:len(payload)-3]); err == nil {
		t.Fatal("a truncated run decoded")
	}
}
