package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"herd/api"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"herd/internal/pki"
)

// Capability is what a route asks of its caller.
type Capability string

// The capabilities routes declare. A token's policies grant them
// (management grants all); a server's certificate grants capServer; a
// node-scoped credential (a node token, or an agent certificate) grants
// capAgent for its own node only.
const (
	// capPublic: anyone (bootstrapping ACLs, which works once).
	capPublic Capability = "public"
	// capAnyone: any valid credential (who the leader is, who a replica is).
	capAnyone     Capability = "any"
	capRead       Capability = "read"
	capSubmit     Capability = "submit"
	capOperator   Capability = "operator"
	capManagement Capability = "management"
	// capAgent: a node acting for itself (or management).
	capAgent Capability = "agent"
	// capAgentOrRead: a node reading its own records, or a reader.
	capAgentOrRead Capability = "agent-or-read"
	// capServerOrOperator: a replica (joining) or an operator.
	capServerOrOperator Capability = "server-or-operator"
	// capAgentOrOperator: any node's agent, or an operator (the gossip
	// keyring, which every member of the pool needs).
	capAgentOrOperator Capability = "agent-or-operator"
)

// ACLBackend holds the replicated tokens and the audit trail.
type ACLBackend interface {
	// ACLEnforced says whether requests need credentials.
	ACLEnforced() bool
	// TokenBySecretHash looks a token up in the local state.
	TokenBySecretHash(hash string) (api.ACLToken, bool)
	// BootstrapACL, CreateToken, DeleteToken and Audit are leader-only.
	BootstrapACL(ctx context.Context) (api.ACLToken, error)
	CreateToken(ctx context.Context, req api.ACLTokenRequest) (api.ACLToken, error)
	DeleteToken(ctx context.Context, accessor string) error
	ListTokens() ([]api.ACLToken, error)
	GetToken(accessor string) (api.ACLToken, error)
	Audit(ctx context.Context, e api.AuditEntry) error
	AuditLog(after uint64, limit int) ([]api.AuditEntry, error)
	// AttemptNode is the node an attempt was placed on.
	AttemptNode(id string) (string, bool)
}

// HashSecret is how a token's secret is stored and looked up.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Principal is who made a request, as the API judged it.
type Principal struct {
	// Actor names the caller in logs and the audit trail: a token's
	// accessor id, a certificate's identity, or "anonymous".
	Actor    string
	policies []string
	// Node, when set, scopes the caller to that node's own records.
	Node string
	// Server: the caller holds a server certificate, for server ServerID.
	Server     bool
	ServerID   string
	Submitters []string
	// open: ACLs are off; everything is allowed but node scoping.
	open bool
}

func (p Principal) has(policy string) bool {
	return p.open || slices.Contains(p.policies, "management") || slices.Contains(p.policies, policy)
}

// allows reports whether p may use a route needing c (node scoping is
// checked separately, against the node the request concerns).
func (p Principal) allows(c Capability) bool {
	switch c {
	case capPublic:
		return true
	case capAnyone:
		return p.Actor != ""
	case capRead:
		return p.has("read") || p.has("operator")
	case capSubmit:
		return p.has("submit")
	case capOperator:
		return p.has("operator")
	case capManagement:
		return p.open || slices.Contains(p.policies, "management")
	case capAgent:
		return p.Node != "" || p.open || slices.Contains(p.policies, "management")
	case capAgentOrRead:
		return p.Node != "" || p.has("read") || p.has("operator")
	case capServerOrOperator:
		return p.Server || p.has("operator")
	case capAgentOrOperator:
		return p.Node != "" || p.has("operator")
	}
	return false
}

// changesTheCluster: a route needing c changes the cluster's membership,
// credentials or nodes, and a refusal of it is audited.
func (c Capability) changesTheCluster() bool {
	return c == capOperator || c == capManagement || c == capServerOrOperator
}

// refusalLimiter keeps the audit records of refused requests to one per
// caller per refusalAuditEvery, so that a caller retrying in a loop cannot
// fill the Raft log.
type refusalLimiter struct {
	mu   sync.Mutex
	last map[string]time.Time
}

const refusalAuditEvery = 10 * time.Second

func (l *refusalLimiter) allow(actor string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[string]time.Time{}
	}
	if t, ok := l.last[actor]; ok && now.Sub(t) < refusalAuditEvery {
		return false
	}
	if len(l.last) > 10000 {
		clear(l.last) // a bound, not a policy: many callers, each recorded again
	}
	l.last[actor] = now
	return true
}

// MaySubmitAs reports whether p may submit tasks for submitter.
func (p Principal) MaySubmitAs(submitter string) bool {
	if p.open || slices.Contains(p.policies, "management") || len(p.Submitters) == 0 {
		return true
	}
	return slices.Contains(p.Submitters, submitter)
}

type principalKey struct{}

// PrincipalOf returns the caller of a request the handler authenticated.
func PrincipalOf(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p
}

// errUnknownToken marks a token this replica does not hold: a follower
// asks the leader, which may have it already.
var errUnknownToken = errors.New("unknown token")

func unauthenticated(msg string) error {
	return &requestError{status: http.StatusUnauthorized, code: api.CodeUnauthenticated, msg: msg}
}

func forbidden(format string, args ...any) error {
	return &requestError{status: http.StatusForbidden, code: api.CodePermissionDenied, msg: fmt.Sprintf(format, args...)}
}

// peerIdentity is the verified certificate identity of the connection, if
// any (the TLS stack has checked the chain against the cluster CA).
func peerIdentity(r *http.Request) (pki.Identity, bool, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return pki.Identity{}, false, nil
	}
	id, err := pki.IdentityOf(r.TLS.PeerCertificates[0])
	if err != nil {
		return pki.Identity{}, false, err
	}
	return id, true, nil
}

// callerIdentity is the certificate identity the request speaks for: the
// connection's own, or, from a server's connection, the identity the
// forwarding replica verified.
func callerIdentity(r *http.Request) (pki.Identity, bool, error) {
	id, ok, err := peerIdentity(r)
	if err != nil || !ok {
		return id, ok, err
	}
	if id.Role == pki.RoleServer && r.Header.Get(api.HeaderForwarded) != "" {
		// A forwarded request speaks for its original caller, never for
		// the replica that forwarded it: a caller without a certificate
		// stays without one.
		v := r.Header.Get(api.HeaderIdentity)
		if v == "" {
			return pki.Identity{}, false, nil
		}
		fwd, err := pki.ParseIdentity(v)
		if err != nil {
			return pki.Identity{}, false, fmt.Errorf("forwarded identity: %w", err)
		}
		return fwd, true, nil
	}
	return id, true, nil
}

// callerAddress is where the request came from: the connection's remote
// host, or, on a request a server forwarded, the host its original caller
// connected from (a client cannot claim an address by sending the
// header itself: it is believed from a server's certificate, or on a
// cluster without TLS, where anyone may do anything anyway).
func callerAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if fwd := r.Header.Get(api.HeaderForwardedFor); fwd != "" && r.Header.Get(api.HeaderForwarded) != "" {
		if id, ok, err := peerIdentity(r); r.TLS == nil || (err == nil && ok && id.Role == pki.RoleServer) {
			return fwd
		}
	}
	return host
}

// authenticate decides who made the request.
func (h *Handler) authenticate(r *http.Request) (Principal, error) {
	id, hasCert, err := callerIdentity(r)
	if err != nil {
		return Principal{}, unauthenticated(err.Error())
	}
	var p Principal
	if hasCert {
		p.Actor = id.String()
		switch id.Role {
		case pki.RoleServer:
			p.Server, p.ServerID = true, id.ID
		case pki.RoleAgent:
			p.Node = id.ID
		}
	}
	secret := r.Header.Get(api.HeaderToken)
	if secret == "" {
		if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			secret = strings.TrimSpace(v)
		}
	}
	if !h.backend.ACLEnforced() {
		p.open = true
		if p.Actor == "" {
			p.Actor = "anonymous"
		}
		return p, nil
	}
	if secret == "" {
		if hasCert && (p.Server || p.Node != "") {
			return p, nil
		}
		return Principal{}, unauthenticated("this request needs a token (X-Herd-Token header, or -token / HERD_TOKEN in the CLI)")
	}
	tok, ok := h.backend.TokenBySecretHash(HashSecret(secret))
	if !ok {
		return Principal{}, errUnknownToken
	}
	if p.Node != "" && tok.NodeID != "" && tok.NodeID != p.Node {
		return Principal{}, forbidden("the token of node %s does not go with the certificate of node %s", tok.NodeID, p.Node)
	}
	p.Actor = tok.AccessorID
	p.policies = tok.Policies
	p.Submitters = tok.Submitters
	if tok.NodeID != "" {
		p.Node = tok.NodeID
	}
	return p, nil
}

// authorize checks p against the route's capability.
func authorize(p Principal, c Capability) error {
	if p.allows(c) {
		return nil
	}
	what := map[Capability]string{
		capAnyone: "a valid credential", capRead: "the read capability", capSubmit: "the submit capability",
		capOperator: "the operator capability", capManagement: "the management capability",
		capAgent: "the credentials of the node's agent (or management)", capAgentOrRead: "the read capability or the node's own credentials",
		capServerOrOperator: "a server certificate or the operator capability",
		capAgentOrOperator:  "a node's credentials or the operator capability",
	}[c]
	if p.Node != "" {
		return forbidden("%s acts for node %s only; this needs %s", p.Actor, p.Node, what)
	}
	return forbidden("%s may not do this: it needs %s", p.Actor, what)
}

// checkNode refuses a node-scoped caller acting for another node, and has
// the refusal recorded in the caller's node events and the audit trail.
func (h *Handler) checkNode(r *http.Request, node, action, target string) error {
	p := PrincipalOf(r.Context())
	if p.Node == "" || p.Node == node {
		return nil
	}
	return h.refuse(r, action, target, forbidden("%s acts for node %s only: it may not %s %s of node %s", p.Actor, p.Node, action, target, node))
}

// refuse records a node-scoped caller's refused request against its own
// node (on the leader, which alone writes) and returns the refusal.
func (h *Handler) refuse(r *http.Request, action, target string, err error) error {
	p := PrincipalOf(r.Context())
	if h.backend.IsLeader() {
		if aerr := h.backend.Audit(r.Context(), api.AuditEntry{Actor: p.Actor, Action: action, Target: target, Outcome: "refused: " + err.Error(), NodeID: p.Node}); aerr != nil {
			h.logger.Warn("could not record a refused request", "actor", p.Actor, "error", aerr)
		}
	}
	return err
}

// audit records an operator action and its outcome; the answer does not
// wait on the record beyond the commit.
func (h *Handler) audit(r *http.Request, action, target string, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "failed: " + err.Error()
	}
	h.auditOutcome(r, action, target, outcome)
}

// auditOutcome records an operator action with the outcome given.
func (h *Handler) auditOutcome(r *http.Request, action, target, outcome string) {
	p := PrincipalOf(r.Context())
	if aerr := h.backend.Audit(r.Context(), api.AuditEntry{Actor: p.Actor, From: callerAddress(r), Action: action, Target: target, Outcome: outcome}); aerr != nil {
		h.logger.Error("could not record an operator action in the audit trail", "actor", p.Actor, "action", action, "target", target, "error", aerr)
	}
}

func (h *Handler) aclRoutes() []route {
	return []route{
		{http.MethodPost, "/v1/acl/bootstrap", leaderOnly, capPublic, h.postBootstrap},
		{http.MethodGet, "/v1/acl/policies", local, capAnyone, h.getPolicies},
		{http.MethodGet, "/v1/acl/tokens", readable, capOperator, h.listTokens},
		{http.MethodPost, "/v1/acl/tokens", leaderOnly, capManagement, h.postToken},
		{http.MethodGet, "/v1/acl/tokens/{id}", readable, capOperator, h.getToken},
		{http.MethodDelete, "/v1/acl/tokens/{id}", leaderOnly, capManagement, h.deleteToken},
		{http.MethodGet, "/v1/acl/token/self", local, capAnyone, h.getTokenSelf},
		{http.MethodGet, "/v1/operator/audit", readable, capOperator, h.getAudit},
	}
}

func (h *Handler) postBootstrap(_ http.ResponseWriter, r *http.Request) (any, error) {
	tok, err := h.backend.BootstrapACL(r.Context())
	h.audit(r, "acl bootstrap", tok.AccessorID, err)
	return tok, err
}

func (h *Handler) getPolicies(http.ResponseWriter, *http.Request) (any, error) {
	return map[string][]api.ACLPolicy{"policies": api.Policies}, nil
}

func (h *Handler) listTokens(http.ResponseWriter, *http.Request) (any, error) {
	toks, err := h.backend.ListTokens()
	if err != nil {
		return nil, err
	}
	return map[string][]api.ACLToken{"tokens": toks}, nil
}

func (h *Handler) postToken(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.ACLTokenRequest
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	tok, err := h.backend.CreateToken(r.Context(), req)
	h.audit(r, "acl token create", strings.Join(req.Policies, ",")+" "+tok.AccessorID, err)
	return tok, err
}

func (h *Handler) getToken(_ http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "token accessor")
	if err != nil {
		return nil, err
	}
	return h.backend.GetToken(id)
}

func (h *Handler) deleteToken(_ http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "token accessor")
	if err != nil {
		return nil, err
	}
	err = h.backend.DeleteToken(r.Context(), id)
	h.audit(r, "acl token delete", id, err)
	if err != nil {
		return nil, err
	}
	return map[string]string{"deleted": id}, nil
}

// getTokenSelf says who the caller is and what it holds.
func (h *Handler) getTokenSelf(_ http.ResponseWriter, r *http.Request) (any, error) {
	p := PrincipalOf(r.Context())
	if p.open {
		return nil, badRequest("ACLs are not enforced on this cluster")
	}
	if tok, err := h.backend.GetToken(p.Actor); err == nil {
		return tok, nil
	}
	return api.ACLToken{AccessorID: p.Actor, NodeID: p.Node}, nil
}

func (h *Handler) getAudit(_ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	after, err := uintParam(q.Get("after"), "after")
	if err != nil {
		return nil, err
	}
	limit, err := uintParam(q.Get("limit"), "limit")
	if err != nil {
		return nil, err
	}
	entries, err := h.backend.AuditLog(after, int(min(limit, 100000)))
	if err != nil {
		return nil, err
	}
	return api.AuditList{Entries: entries}, nil
}

// uintParam reads an optional non-negative whole number.
func uintParam(v, name string) (uint64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, badRequest("%s %q must be a non-negative whole number", name, v)
	}
	return n, nil
}
