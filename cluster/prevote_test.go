package cluster

import (
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// The look sees every pre-vote request before raft's consumer gets it,
// and nothing else; every request still reaches the consumer and its
// answer the sender.
func TestPreVoteLookSeesPreVotesFirst(t *testing.T) {
	recvT, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer recvT.Close()
	sendT, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer sendT.Close()
	p := newPreVoteLook(recvT)
	defer p.stop()

	var mu sync.Mutex
	var order []string
	p.setLook(func(req *raft.RequestPreVoteRequest) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, "look")
	})
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for range 2 {
			rpc := <-p.Consumer()
			mu.Lock()
			switch rpc.Command.(type) {
			case *raft.RequestPreVoteRequest:
				order = append(order, "raft: pre-vote")
				mu.Unlock()
				rpc.Respond(&raft.RequestPreVoteResponse{Term: 5, Granted: true}, nil)
			case *raft.AppendEntriesRequest:
				order = append(order, "raft: append")
				mu.Unlock()
				rpc.Respond(&raft.AppendEntriesResponse{Term: 5, Success: true}, nil)
			default:
				mu.Unlock()
				rpc.Respond(nil, io.ErrUnexpectedEOF)
			}
		}
	}()

	target := recvT.LocalAddr()
	var ae raft.AppendEntriesResponse
	if err := sendT.AppendEntries("r", target, &raft.AppendEntriesRequest{Term: 5, Entries: []*raft.Log{{Index: 1, Term: 5, Type: raft.LogCommand, Data: []byte("x")}}}, &ae); err != nil || !ae.Success {
		t.Fatalf("append: %v, %+v", err, ae)
	}
	var pv raft.RequestPreVoteResponse
	if err := sendT.RequestPreVote("r", target, &raft.RequestPreVoteRequest{Term: 5, LastLogTerm: 4, LastLogIndex: 9}, &pv); err != nil || !pv.Granted {
		t.Fatalf("pre-vote: %v, %+v", err, pv)
	}
	<-consumed
	mu.Lock()
	defer mu.Unlock()
	want := []string{"raft: append", "look", "raft: pre-vote"}
	if len(order) != len(want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order %v, want %v", order, want)
		}
	}
}

// stop ends the forwarding goroutine even with nothing arriving.
func TestPreVoteLookStops(t *testing.T) {
	tr, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	p := newPreVoteLook(tr)
	p.stop()
	p.stop() // twice is harmless
}
