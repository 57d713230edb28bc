package httpapi

import (
	"context"
	"herd/api"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// A client told by a follower where the leader is sends its next writes
// there; its reads stay on the replica it reads from.
func TestClientSendsWritesToTheLeaderItLearns(t *testing.T) {
	leader := httptest.NewServer(NewHandler(newFake(), nil))
	defer leader.Close()
	ff := newFake()
	ff.leader, ff.leaderAddr = false, strings.TrimPrefix(leader.URL, "http://")
	var atFollower atomic.Int32
	fh := NewHandler(ff, nil)
	follower := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		atFollower.Add(1)
		fh.ServeHTTP(w, r)
	}))
	defer follower.Close()
	cl, err := api.NewClient(follower.URL, leader.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 3 {
		if _, _, err := cl.SubmitTask(ctx, api.TaskSpec{Command: []string{"true"}}); err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	if n := atFollower.Load(); n != 1 {
		t.Fatalf("the follower saw %d of 3 writes; after the first, the leader should get them", n)
	}
	if _, _, err := cl.ListNodes(ctx, api.ReadOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := atFollower.Load(); n != 2 {
		t.Fatalf("a read went elsewhere than the replica read from (follower saw %d)", n)
	}
}
