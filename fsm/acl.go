package fsm

import (
	"slices"
	"time"

	"github.com/google/btree"

	"herd/internal/check"
)

// ACLToken is a credential: a public accessor id, the SHA-256 of its
// secret (the secret itself is never stored), and the policies it holds.
// A token with a NodeID is node-scoped: it acts for that node's agent
// alone.
type ACLToken struct {
	AccessorID string   `json:"accessor_id"`
	SecretHash string   `json:"secret_hash"`
	Name       string   `json:"name,omitempty"`
	Policies   []string `json:"policies"`
	NodeID     string   `json:"node_id,omitempty"`
	// Submitters, when set, limits a submit policy to tasks of these
	// submitters.
	Submitters  []string `json:"submitters,omitempty"`
	CreateTime  Stamp    `json:"create_time"`
	CreateIndex uint64   `json:"create_index"`
}

// ACLTokenRequest creates a token (or, with Bootstrap, the cluster's
// first management token, which succeeds once per cluster).
type ACLTokenRequest struct {
	Token     ACLToken  `json:"token"`
	Bootstrap bool      `json:"bootstrap,omitempty"`
	Now       time.Time `json:"now"`
}

// ACLTokenDeleteRequest deletes a token by accessor id.
type ACLTokenDeleteRequest struct {
	AccessorID string `json:"accessor_id"`
}

// AuditRecord is one operator action (or one refused agent request),
// written by the leader with the time it judged it.
type AuditRecord struct {
	Index uint64 `json:"index"`
	Time  Stamp  `json:"time"`
	// Actor is a token's accessor id or a certificate's identity.
	Actor string `json:"actor"`
	// From is the address the request came from.
	From    string `json:"from,omitempty"`
	Action  string `json:"action"`
	Target  string `json:"target,omitempty"`
	Outcome string `json:"outcome"`
	// NodeID, when set, also records the record as an event of that node
	// (an agent refused for acting beyond its node).
	NodeID string `json:"node_id,omitempty"`
}

// AuditRequest appends an audit record.
type AuditRequest struct {
	Record AuditRecord `json:"record"`
	Now    time.Time   `json:"now"`
}

// maxAudit bounds the audit trail; the oldest records go first.
const maxAudit = 10000

// aclMeta is the cluster's ACL bookkeeping, one record in snapshots.
type aclMeta struct {
	ID             string `json:"id"`
	BootstrapIndex uint64 `json:"bootstrap_index"`
}

const aclMetaID = "acl"

// aclStore is the part of the store that holds tokens and the audit trail.
type aclStore struct {
	tokens       *btree.BTreeG[*ACLToken] // by accessor id
	tokensByHash *btree.BTreeG[*ACLToken] // by secret hash
	audit        *btree.BTreeG[*AuditRecord]
	meta         aclMeta
}

func newACLStore() aclStore {
	return aclStore{
		tokens:       btree.NewG(btreeDegree, func(a, b *ACLToken) bool { return a.AccessorID < b.AccessorID }),
		tokensByHash: btree.NewG(btreeDegree, func(a, b *ACLToken) bool { return a.SecretHash < b.SecretHash }),
		audit:        btree.NewG(btreeDegree, func(a, b *AuditRecord) bool { return a.Index < b.Index }),
		meta:         aclMeta{ID: aclMetaID},
	}
}

func (a aclStore) clone() aclStore {
	return aclStore{tokens: a.tokens.Clone(), tokensByHash: a.tokensByHash.Clone(), audit: a.audit.Clone(), meta: a.meta}
}

func (s *store) putToken(t *ACLToken) {
	if old, ok := s.acl.tokens.ReplaceOrInsert(t); ok {
		s.acl.tokensByHash.Delete(old)
	}
	s.acl.tokensByHash.ReplaceOrInsert(t)
}

func (s *store) putAudit(r *AuditRecord) {
	s.acl.audit.ReplaceOrInsert(r)
	for s.acl.audit.Len() > maxAudit {
		s.acl.audit.DeleteMin()
	}
}

// Policies a token may hold.
var ACLPolicies = []string{"management", "operator", "submit", "read", "agent"}

func validToken(t *ACLToken) error {
	if !check.ID(t.AccessorID) {
		return reject(RejectInvalid, "accessor id %q is not valid", t.AccessorID)
	}
	if len(t.SecretHash) != 64 {
		return reject(RejectInvalid, "secret hash must be 64 hex digits")
	}
	if len(t.Policies) == 0 {
		return reject(RejectInvalid, "a token needs at least one policy")
	}
	for _, p := range t.Policies {
		if !slices.Contains(ACLPolicies, p) {
			return reject(RejectInvalid, "unknown policy %q (one of %v)", p, ACLPolicies)
		}
	}
	if slices.Contains(t.Policies, "agent") != (t.NodeID != "") {
		return reject(RejectInvalid, "a node-scoped token holds the agent policy and names its node, and only such a token")
	}
	if t.NodeID != "" && !check.ID(t.NodeID) {
		return reject(RejectInvalid, "node id %q is not valid", t.NodeID)
	}
	return nil
}

func applyACLToken(db *store, index uint64, r *ACLTokenRequest) (any, error) {
	t := r.Token
	if err := validToken(&t); err != nil {
		return nil, err
	}
	if r.Bootstrap {
		if db.acl.meta.BootstrapIndex != 0 {
			return nil, reject(RejectConflict, "ACLs were bootstrapped already (at index %d)", db.acl.meta.BootstrapIndex)
		}
		if !slices.Equal(t.Policies, []string{"management"}) {
			return nil, reject(RejectInvalid, "the bootstrap token holds the management policy alone")
		}
		db.acl.meta.BootstrapIndex = index
	}
	if _, ok := db.acl.tokens.Get(&ACLToken{AccessorID: t.AccessorID}); ok {
		return nil, reject(RejectConflict, "token %s exists", t.AccessorID)
	}
	if _, ok := db.acl.tokensByHash.Get(&ACLToken{SecretHash: t.SecretHash}); ok {
		return nil, reject(RejectConflict, "a token with this secret exists")
	}
	t.Policies = slices.Clone(t.Policies)
	t.Submitters = slices.Clone(t.Submitters)
	t.CreateTime = StampOf(r.Now)
	t.CreateIndex = index
	db.putToken(&t)
	return &t, nil
}

func applyACLTokenDelete(db *store, r *ACLTokenDeleteRequest) (any, error) {
	t, ok := db.acl.tokens.Get(&ACLToken{AccessorID: r.AccessorID})
	if !ok {
		return nil, reject(RejectNotFound, "token %s not found", r.AccessorID)
	}
	db.acl.tokens.Delete(t)
	db.acl.tokensByHash.Delete(t)
	return t, nil
}

func applyAudit(db *store, index uint64, r *AuditRequest) (any, error) {
	rec := r.Record
	if rec.Action == "" {
		return nil, reject(RejectInvalid, "an audit record names its action")
	}
	rec.Index = index
	rec.Time = StampOf(r.Now)
	db.putAudit(&rec)
	if rec.NodeID != "" {
		if node, ok := db.node(rec.NodeID); ok {
			n := node.clone()
			n.addEvent(index, r.Now, EventRefused, rec.Action+" "+rec.Target+": "+rec.Outcome)
			n.ModifyIndex = index
			db.putNode(n)
		}
	}
	return &rec, nil
}

// ACLBootstrapIndex is the index ACLs were bootstrapped at, 0 before.
func (s *State) ACLBootstrapIndex() uint64 { return s.st.acl.meta.BootstrapIndex }

// TokenBySecretHash finds a token by its secret's hash.
func (s *State) TokenBySecretHash(hash string) (*ACLToken, bool) {
	return s.st.acl.tokensByHash.Get(&ACLToken{SecretHash: hash})
}

// Token finds a token by accessor id.
func (s *State) Token(accessor string) (*ACLToken, bool) {
	return s.st.acl.tokens.Get(&ACLToken{AccessorID: accessor})
}

// Tokens lists tokens in accessor order.
func (s *State) Tokens() []*ACLToken {
	var out []*ACLToken
	s.st.acl.tokens.Ascend(func(t *ACLToken) bool { out = append(out, t); return true })
	return out
}

// Audit lists audit records after index, oldest first, at most limit.
func (s *State) Audit(after uint64, limit int) []*AuditRecord {
	var out []*AuditRecord
	s.st.acl.audit.AscendGreaterOrEqual(&AuditRecord{Index: after + 1}, func(r *AuditRecord) bool {
		out = append(out, r)
		return limit <= 0 || len(out) < limit
	})
	return out
}
