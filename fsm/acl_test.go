package fsm

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"herd/scheduler"
)

func hash(c byte) string { return strings.Repeat(string(c), 64) }

// Bootstrap succeeds once; tokens are found by their secret's hash and
// refused when malformed or duplicated; a deleted token is gone.
func TestACLTokens(t *testing.T) {
	h := newHarness(t)
	rejected := func(v any, code string) {
		t.Helper()
		var rej *Rejection
		if !errors.As(asErr(v), &rej) || rej.Code != code {
			t.Fatalf("got %#v, want a %s rejection", v, code)
		}
	}
	boot := ACLTokenRequest{Token: ACLToken{AccessorID: "root", SecretHash: hash('a'), Policies: []string{"management"}}, Bootstrap: true, Now: epoch}
	if tok, ok := h.apply(MsgACLToken, boot).(*ACLToken); !ok || tok.CreateTime != StampOf(epoch) {
		t.Fatalf("bootstrap: %#v", tok)
	}
	if h.f.State().ACLBootstrapIndex() != h.index {
		t.Fatal("bootstrap index not kept")
	}
	again := boot
	again.Token.AccessorID, again.Token.SecretHash = "root2", hash('b')
	rejected(h.apply(MsgACLToken, again), RejectConflict)

	agentTok := ACLTokenRequest{Token: ACLToken{AccessorID: "n1-tok", SecretHash: hash('c'), Policies: []string{"agent"}, NodeID: "n1"}, Now: epoch}
	if _, ok := h.apply(MsgACLToken, agentTok).(*ACLToken); !ok {
		t.Fatal("agent token refused")
	}
	for _, bad := range []ACLToken{
		{AccessorID: "x", SecretHash: hash('d'), Policies: []string{"agent"}},              // agent without a node
		{AccessorID: "x", SecretHash: hash('d'), Policies: []string{"read"}, NodeID: "n1"}, // a node without the agent policy
		{AccessorID: "x", SecretHash: hash('d'), Policies: []string{"root"}},               // unknown policy
		{AccessorID: "x", SecretHash: "short", Policies: []string{"read"}},                 // bad hash
		{AccessorID: "x", SecretHash: hash('d')},                                           // no policy
		{AccessorID: "n1-tok", SecretHash: hash('e'), Policies: []string{"read"}},          // accessor taken
		{AccessorID: "y", SecretHash: hash('c'), Policies: []string{"read"}},               // secret taken
	} {
		v := h.apply(MsgACLToken, ACLTokenRequest{Token: bad, Now: epoch})
		if _, ok := v.(*ACLToken); ok {
			t.Errorf("accepted %+v", bad)
		}
	}
	st := h.f.State()
	if tok, ok := st.TokenBySecretHash(hash('c')); !ok || tok.NodeID != "n1" {
		t.Fatalf("lookup by hash: %+v", tok)
	}
	if n := len(st.Tokens()); n != 2 {
		t.Fatalf("%d tokens", n)
	}
	h.apply(MsgACLTokenDelete, ACLTokenDeleteRequest{AccessorID: "n1-tok"})
	if _, ok := h.f.State().TokenBySecretHash(hash('c')); ok {
		t.Fatal("deleted token still found")
	}
	rejected(h.apply(MsgACLTokenDelete, ACLTokenDeleteRequest{AccessorID: "n1-tok"}), RejectNotFound)
}

func asErr(v any) error {
	if err, ok := v.(error); ok {
		return err
	}
	return nil
}

// Audit records keep their order and time, a refused agent request is an
// event of its node, and tokens and audit survive a snapshot whole.
func TestAuditAndACLSurviveSnapshot(t *testing.T) {
	h := newHarness(t)
	h.register("n1", scheduler.Resources{CPUMillis: 1000, MemoryMB: 1024}, 2)
	h.apply(MsgACLToken, ACLTokenRequest{Token: ACLToken{AccessorID: "root", SecretHash: hash('a'), Policies: []string{"management"}}, Bootstrap: true, Now: epoch})
	h.apply(MsgAudit, AuditRequest{Record: AuditRecord{Actor: "root", Action: "drain", Target: "n1", Outcome: "ok"}, Now: epoch.Add(time.Second)})
	h.apply(MsgAudit, AuditRequest{Record: AuditRecord{Actor: "agent/n1", Action: "complete attempt", Target: "a9", Outcome: "refused: placed on n2", NodeID: "n1"}, Now: epoch.Add(2 * time.Second)})
	if v := h.apply(MsgAudit, AuditRequest{Record: AuditRecord{Actor: "x"}}); asErr(v) == nil {
		t.Fatal("audit without an action accepted")
	}
	st := h.f.State()
	recs := st.Audit(0, 0)
	if len(recs) != 2 || recs[0].Action != "drain" || recs[1].Time != StampOf(epoch.Add(2*time.Second)) {
		t.Fatalf("audit: %+v", recs)
	}
	if later := st.Audit(recs[0].Index, 0); len(later) != 1 || later[0].Index != recs[1].Index {
		t.Fatalf("audit after %d: %+v", recs[0].Index, later)
	}
	n, _ := st.Node("n1")
	if last := n.Events[len(n.Events)-1]; last.Kind != EventRefused || !strings.Contains(last.Message, "a9") {
		t.Fatalf("node event: %+v", last)
	}

	var buf bytes.Buffer
	if err := h.f.State().Dump(&buf); err != nil {
		t.Fatal(err)
	}
	g := New(nil)
	if err := g.Restore(io.NopCloser(bytes.NewReader(buf.Bytes()))); err != nil {
		t.Fatal(err)
	}
	a, _ := h.f.State().Hash()
	b, _ := g.State().Hash()
	if a != b || g.State().ACLBootstrapIndex() == 0 || len(g.State().Audit(0, 0)) != 2 {
		t.Fatalf("restored state differs: %s vs %s", a, b)
	}
	if _, ok := g.State().Token("root"); !ok {
		t.Fatal("token lost in the snapshot")
	}
}

func TestAuditTrailIsBounded(t *testing.T) {
	h := newHarness(t)
	for i := 0; i < maxAudit+5; i++ {
		h.apply(MsgAudit, AuditRequest{Record: AuditRecord{Actor: "x", Action: "a"}, Now: epoch})
	}
	recs := h.f.State().Audit(0, 0)
	if len(recs) != maxAudit || recs[0].Index != h.index-maxAudit+1 {
		t.Fatalf("%d records from %d", len(recs), recs[0].Index)
	}
}

// The keyring starts from the members' configured key, installs, uses
// and removes keys with the reasons for refusals, and survives a snapshot.
func TestGossipKeyring(t *testing.T) {
	h := newHarness(t)
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 16)
	op := func(o string, k []byte) any {
		return h.apply(MsgGossipKeyring, GossipKeyringRequest{Op: o, Key: k, Base: [][]byte{k1}})
	}
	for _, bad := range []any{op("use", k2), op("remove", k2), op("install", []byte("short")), op("drop", k2)} {
		if asErr(bad) == nil {
			t.Fatalf("accepted: %#v", bad)
		}
	}
	kr := op("install", k2).(*GossipKeyring)
	if len(kr.Keys) != 2 || !bytes.Equal(kr.Primary, k1) || kr.Index != h.index {
		t.Fatalf("after install: %+v", kr)
	}
	if asErr(op("remove", k1)) == nil {
		t.Fatal("removed the primary")
	}
	op("use", k2)
	kr = op("remove", k1).(*GossipKeyring)
	if len(kr.Keys) != 1 || !bytes.Equal(kr.Keys[0], k2) || !bytes.Equal(kr.Primary, k2) {
		t.Fatalf("after use and remove: %+v", kr)
	}
	g := restoredCopy(t, h.f)
	if got := g.State().GossipKeyring(); got.Index != kr.Index || !bytes.Equal(got.Primary, k2) {
		t.Fatalf("restored keyring %+v", got)
	}
}
