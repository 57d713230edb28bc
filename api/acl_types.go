package api

import "time"

// Headers of authentication: the caller's token, and the certificate
// identity a follower vouches for when it forwards a request (trusted only
// from a server's certificate).
const (
	HeaderToken    = "X-Herd-Token"
	HeaderIdentity = "X-Herd-Identity"
)

// Codes of the 401 and 403 answers.
const (
	CodeUnauthenticated  = "unauthenticated"
	CodePermissionDenied = "permission_denied"
)

// ACLToken is a token as the API shows it: never its secret, except once,
// in the answer that created it (SecretID).
type ACLToken struct {
	AccessorID string    `json:"accessor_id"`
	SecretID   string    `json:"secret_id,omitempty"`
	Name       string    `json:"name,omitempty"`
	Policies   []string  `json:"policies"`
	NodeID     string    `json:"node_id,omitempty"`
	Submitters []string  `json:"submitters,omitempty"`
	CreateTime time.Time `json:"create_time"`
}

// ACLTokenRequest asks for a new token.
type ACLTokenRequest struct {
	Name     string   `json:"name,omitempty"`
	Policies []string `json:"policies"`
	// NodeID makes a node-scoped token (the agent policy): it acts for
	// that node's agent alone.
	NodeID     string   `json:"node_id,omitempty"`
	Submitters []string `json:"submitters,omitempty"`
}

// ACLPolicy describes a built-in policy.
type ACLPolicy struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// Policies are the built-in policies a token may hold.
var Policies = []ACLPolicy{
	{"management", "everything, tokens included"},
	{"operator", "raft peers and leadership, snapshots, node drain and eligibility, reading tokens and the audit trail, and every read"},
	{"submit", "submit and cancel tasks (only of its submitters, when the token names any)"},
	{"read", "every read: status, tasks, nodes, explanations"},
	{"agent", "a node's own registration, heartbeats, conditions, assignments and attempts (node-scoped tokens only)"},
}

// AuditEntry is one recorded operator action, or one refused agent request.
type AuditEntry struct {
	Index uint64    `json:"index"`
	Time  time.Time `json:"time"`
	Actor string    `json:"actor"`
	// From is the address the request came from (its first hop's, when a
	// replica forwarded it to the leader).
	From    string `json:"from,omitempty"`
	Action  string `json:"action"`
	Target  string `json:"target,omitempty"`
	Outcome string `json:"outcome"`
	NodeID  string `json:"node_id,omitempty"`
}

// AuditList is the answer of GET /v1/operator/audit.
type AuditList struct {
	Entries []AuditEntry `json:"entries"`
}

// GossipKeyring is the gossip pool's keyring as the leader holds it: the
// keys every member accepts (base64), the primary one members encrypt
// with, and which nodes' agents have not reported running it yet.
type GossipKeyring struct {
	Keys    []string `json:"keys"`
	Primary string   `json:"primary"`
	// Index is the Raft index that last changed it (0: never changed;
	// members run with their configured key).
	Index uint64 `json:"index"`
	// NodesCurrent counts the nodes whose agents reported this keyring;
	// NodesBehind names the live ones that have not yet.
	NodesCurrent int      `json:"nodes_current"`
	NodesBehind  []string `json:"nodes_behind,omitempty"`
}

// GossipKeyringRequest changes the keyring: install a key (every member
// then accepts it), use it (members encrypt with it), remove it.
type GossipKeyringRequest struct {
	Op  string `json:"op"`
	Key string `json:"key"`
}
