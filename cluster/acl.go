package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"herd/internal/httpapi"
	"slices"
	"sync"
	"time"

	"herd/api"
	"herd/fsm"
	"herd/internal/check"
)

// aclEndpoints serves tokens and the audit trail over a replica: whether
// it enforces ACLs, and how often a node's refused requests are recorded.
type aclEndpoints struct {
	r        proposer
	enforced bool
	// refusals limits the audit records of a node's refused requests.
	refusals *refusalLimiter
}

// ACLEnforced says whether the replica demands credentials.
func (e *aclEndpoints) ACLEnforced() bool { return e.enforced }

// TokenBySecretHash finds a token in the local state.
func (e *aclEndpoints) TokenBySecretHash(hash string) (api.ACLToken, bool) {
	t, ok := e.r.State().TokenBySecretHash(hash)
	if !ok {
		return api.ACLToken{}, false
	}
	return toAPIToken(t), true
}

func toAPIToken(t *fsm.ACLToken) api.ACLToken {
	return api.ACLToken{
		AccessorID: t.AccessorID, Name: t.Name, Policies: slices.Clone(t.Policies), NodeID: t.NodeID,
		Submitters: slices.Clone(t.Submitters), CreateTime: t.CreateTime.Time(),
	}
}

// randomID is 128 random bits in the form of a UUID.
func randomID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// BootstrapACL creates the first management token (leader-only); it
// succeeds once per cluster.
func (e *aclEndpoints) BootstrapACL(ctx context.Context) (api.ACLToken, error) {
	return e.createToken(ctx, api.ACLTokenRequest{Name: "bootstrap", Policies: []string{"management"}}, true)
}

// CreateToken creates a token (leader-only) and returns it with its
// secret, which is not stored anywhere.
func (e *aclEndpoints) CreateToken(ctx context.Context, req api.ACLTokenRequest) (api.ACLToken, error) {
	if req.NodeID != "" && len(req.Policies) == 0 {
		req.Policies = []string{"agent"}
	}
	if len(req.Name) > 256 {
		return api.ACLToken{}, fmt.Errorf("name is longer than 256 bytes: %w", api.ErrBadRequest)
	}
	for _, sub := range req.Submitters {
		if !check.ID(sub) {
			return api.ACLToken{}, fmt.Errorf("submitter %q is not valid: %w", sub, api.ErrBadRequest)
		}
	}
	return e.createToken(ctx, req, false)
}

func (e *aclEndpoints) createToken(ctx context.Context, req api.ACLTokenRequest, bootstrap bool) (api.ACLToken, error) {
	if !e.r.IsLeader() {
		return api.ACLToken{}, fmt.Errorf("%s: %w", e.r.ID(), api.ErrNotLeader)
	}
	secret := randomID()
	tok := fsm.ACLToken{
		AccessorID: randomID(), SecretHash: httpapi.HashSecret(secret), Name: req.Name,
		Policies: req.Policies, NodeID: req.NodeID, Submitters: req.Submitters,
	}
	resp, _, err := e.r.apply(ctx, fsm.MsgACLToken, fsm.ACLTokenRequest{Token: tok, Bootstrap: bootstrap, Now: e.r.Now().UTC()})
	if err != nil {
		return api.ACLToken{}, err
	}
	out := toAPIToken(resp.(*fsm.ACLToken))
	out.SecretID = secret
	return out, nil
}

// DeleteToken deletes a token (leader-only); requests carrying it are
// refused from the moment the deletion applies on the replica answering.
func (e *aclEndpoints) DeleteToken(ctx context.Context, accessor string) error {
	if !e.r.IsLeader() {
		return fmt.Errorf("%s: %w", e.r.ID(), api.ErrNotLeader)
	}
	_, _, err := e.r.apply(ctx, fsm.MsgACLTokenDelete, fsm.ACLTokenDeleteRequest{AccessorID: accessor})
	return err
}

// ListTokens lists tokens, without secrets.
func (e *aclEndpoints) ListTokens() ([]api.ACLToken, error) {
	toks := e.r.State().Tokens()
	out := make([]api.ACLToken, len(toks))
	for i, t := range toks {
		out[i] = toAPIToken(t)
	}
	return out, nil
}

// GetToken reads one token, without its secret.
func (e *aclEndpoints) GetToken(accessor string) (api.ACLToken, error) {
	t, ok := e.r.State().Token(accessor)
	if !ok {
		return api.ACLToken{}, fmt.Errorf("token %s: %w", accessor, api.ErrNotFound)
	}
	return toAPIToken(t), nil
}

// refusalEvery bounds how often a node's refused requests are written to
// the log: an agent gone wrong may retry a refused request in a loop, and
// each record is a Raft entry. The HTTP answers are refused all the same.
const refusalEvery = time.Second

type refusalLimiter struct {
	mu     sync.Mutex
	last   map[string]time.Time
	folded map[string]int // refusals not written since the last record
}

// allow says whether a refusal of node's is written now, and how many
// were left unwritten since its last record (the record says so).
func (l *refusalLimiter) allow(node string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil || len(l.last) > 10000 {
		l.last, l.folded = map[string]time.Time{}, map[string]int{}
	}
	if t, ok := l.last[node]; ok && now.Sub(t) < refusalEvery {
		l.folded[node]++
		return false, 0
	}
	l.last[node] = now
	n := l.folded[node]
	delete(l.folded, node)
	return true, n
}

// Audit records an operator action, or a refused agent request, in the
// replicated audit trail (leader-only).
func (e *aclEndpoints) Audit(ctx context.Context, entry api.AuditEntry) error {
	if !e.r.IsLeader() {
		return fmt.Errorf("%s: %w", e.r.ID(), api.ErrNotLeader)
	}
	now := e.r.Now().UTC()
	if entry.NodeID != "" {
		ok, folded := e.refusals.allow(entry.NodeID, now)
		if !ok {
			return nil
		}
		if folded > 0 {
			entry.Outcome += fmt.Sprintf(" (and %d more refused requests of this node since its last record)", folded)
		}
	}
	_, _, err := e.r.apply(ctx, fsm.MsgAudit, fsm.AuditRequest{Record: fsm.AuditRecord{
		Actor: entry.Actor, From: entry.From, Action: entry.Action, Target: entry.Target, Outcome: entry.Outcome, NodeID: entry.NodeID,
	}, Now: now})
	return err
}

// AuditLog lists audit records after index, oldest first.
func (e *aclEndpoints) AuditLog(after uint64, limit int) ([]api.AuditEntry, error) {
	recs := e.r.State().Audit(after, limit)
	out := make([]api.AuditEntry, len(recs))
	for i, r := range recs {
		out[i] = api.AuditEntry{Index: r.Index, Time: r.Time.Time(), Actor: r.Actor, From: r.From, Action: r.Action, Target: r.Target, Outcome: r.Outcome, NodeID: r.NodeID}
	}
	return out, nil
}

// AttemptNode is the node an attempt was placed on.
func (e *aclEndpoints) AttemptNode(id string) (string, bool) {
	a, err := e.r.State().Attempt(id)
	if err != nil {
		return "", false
	}
	return a.NodeID, true
}
