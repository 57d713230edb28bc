package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"herd/api"
	"io"
	"net/http"
	"strconv"
)

// OperatorBackend changes the Raft group and its state as a whole. Every
// method is leader-only.
type OperatorBackend interface {
	// Join adds a server as a voter once it answers at its address as
	// that server, or refreshes a member's record.
	Join(ctx context.Context, req api.JoinRequest) error
	// RemovePeer removes a server; unless forced, not when the voters
	// left could not reach a quorum among those that answer.
	RemovePeer(ctx context.Context, id string, force bool) error
	// TransferLeadership hands leadership to targetID, or to any
	// up-to-date voter when targetID is empty.
	TransferLeadership(ctx context.Context, targetID string) error
	// SnapshotSave streams an archive of the state to w.
	SnapshotSave(ctx context.Context, w io.Writer) error
	// SnapshotRestore replaces the cluster's state with the archive read
	// from r.
	SnapshotRestore(ctx context.Context, r io.Reader) error
	// GossipKeyring answers the pool's keyring and who lacks it;
	// ChangeGossipKeyring installs, uses or removes a key.
	GossipKeyring() (api.GossipKeyring, error)
	ChangeGossipKeyring(ctx context.Context, req api.GossipKeyringRequest) (api.GossipKeyring, error)
}

func (h *Handler) operatorRoutes() []route {
	return []route{
		{http.MethodGet, "/v1/operator/gossip/keyring", leaderOnly, capAgentOrOperator, h.getKeyring},
		{http.MethodPost, "/v1/operator/gossip/keyring", leaderOnly, capOperator, h.postKeyring},
		{http.MethodDelete, "/v1/operator/raft/peer", leaderOnly, capOperator, h.deletePeer},
		{http.MethodPost, "/v1/operator/raft/join", leaderOnly, capServerOrOperator, h.postJoin},
		{http.MethodPut, "/v1/operator/raft/transfer-leadership", leaderOnly, capOperator, h.putTransferLeadership},
		{http.MethodGet, "/v1/operator/snapshot", leaderOnly, capOperator, h.getSnapshot},
		{http.MethodPut, "/v1/operator/snapshot", leaderOnly, capOperator, h.putSnapshot},
	}
}

// needsCertificate refuses a request to one of the operations that can
// take the whole cluster down (a peer's removal, a snapshot's restore)
// from a caller with a token alone, on a cluster with TLS: a token that
// leaks is not enough for those; the operator presents their own
// certificate too (herd tls cert create -client; the CLI's -client-cert
// and -client-key).
func (h *Handler) needsCertificate(r *http.Request, action, target string) error {
	if r.TLS == nil {
		return nil
	}
	if _, ok, err := callerIdentity(r); err == nil && ok {
		return nil
	}
	p := PrincipalOf(r.Context())
	err := forbidden("%s may not %s with a token alone: on a cluster with TLS it takes an operator's certificate as well (herd tls cert create -client -id NAME; -client-cert and -client-key in the CLI)", p.Actor, action)
	h.audit(r, action, target, err)
	return err
}

func (h *Handler) deletePeer(_ http.ResponseWriter, r *http.Request) (any, error) {
	id := r.URL.Query().Get("id")
	if !api.ValidID(id) {
		return nil, badRequest("query parameter id %q is not a valid server id", id)
	}
	if err := h.needsCertificate(r, "raft peer remove", id); err != nil {
		return nil, err
	}
	force := false
	if v := r.URL.Query().Get("force"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, badRequest("query parameter force %q is not true or false", v)
		}
		force = b
	}
	what := id
	if force {
		// Recorded first too: a forced removal may cost this replica its
		// leadership before the outcome can be written.
		what += " (forced)"
		h.auditOutcome(r, "raft peer remove", what, "requested")
	}
	err := h.backend.RemovePeer(r.Context(), id, force)
	h.audit(r, "raft peer remove", what, err)
	if err != nil {
		return nil, err
	}
	return map[string]string{"removed": id}, nil
}

// postJoin adds a server to the Raft group, or brings its record up to
// date. On a cluster with TLS only the server being added may ask, with
// its own certificate: one operator token must not be able to add a
// voter that does not exist and move the quorum. A join that adds a
// member is audited; the record refreshes servers send every few seconds
// are not.
func (h *Handler) postJoin(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.JoinRequest
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	if !api.ValidID(req.ID) || req.RaftAddress == "" || req.HTTPAddress == "" {
		return nil, badRequest("join needs a valid id, raft_address and http_address")
	}
	if p := PrincipalOf(r.Context()); r.TLS != nil && !(p.Server && p.ServerID == req.ID) {
		err := forbidden("%s may not add server %s: on a cluster with TLS a server joins itself, with its own certificate (server/%s; start it with -join)", p.Actor, req.ID, req.ID)
		h.audit(r, "raft join", req.ID, err)
		return nil, err
	}
	err := h.backend.Join(r.Context(), req)
	if !req.UpdateOnly {
		h.audit(r, "raft join", req.ID+" at "+req.RaftAddress, err)
	}
	if err != nil {
		return nil, err
	}
	return map[string]string{"joined": req.ID}, nil
}

func (h *Handler) putTransferLeadership(_ http.ResponseWriter, r *http.Request) (any, error) {
	target := r.URL.Query().Get("id")
	if target != "" && !api.ValidID(target) {
		return nil, badRequest("query parameter id %q is not a valid server id", target)
	}
	// Recorded first: once leadership moves, this replica cannot write.
	h.auditOutcome(r, "raft transfer leadership", target, "requested")
	if err := h.backend.TransferLeadership(r.Context(), target); err != nil {
		return nil, err
	}
	l, err := h.backend.Leader()
	if err != nil {
		return map[string]string{"result": "leadership transferred"}, nil
	}
	return l, nil
}

// getSnapshot streams the archive. Once bytes are streamed the status is
// sent; a later failure can only cut the stream short, which the
// archive's checksum reveals on restore.
func (h *Handler) getSnapshot(w http.ResponseWriter, r *http.Request) (any, error) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="herd.snap"`)
	sw := &statusWriter{ResponseWriter: w}
	if err := h.backend.SnapshotSave(r.Context(), sw); err != nil {
		if !sw.wrote {
			w.Header().Del("Content-Disposition")
			return nil, err
		}
		h.logger.Error("snapshot stream failed midway", "error", err)
	}
	return written, nil
}

func (h *Handler) putSnapshot(w http.ResponseWriter, r *http.Request) (any, error) {
	if err := h.needsCertificate(r, "snapshot restore", ""); err != nil {
		return nil, err
	}
	r.Body = http.MaxBytesReader(w, r.Body, api.MaxSnapshotBytes)
	err := h.backend.SnapshotRestore(r.Context(), r.Body)
	h.audit(r, "snapshot restore", "", err)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &requestError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("snapshot larger than %d bytes", mbe.Limit)}
		}
		return nil, err
	}
	return map[string]string{"result": "snapshot restored"}, nil
}

func (h *Handler) getKeyring(http.ResponseWriter, *http.Request) (any, error) {
	return h.backend.GossipKeyring()
}

func (h *Handler) postKeyring(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.GossipKeyringRequest
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	switch req.Op {
	case "install", "use", "remove":
	default:
		return nil, badRequest("op %q must be install, use or remove", req.Op)
	}
	kr, err := h.backend.ChangeGossipKeyring(r.Context(), req)
	// The audit names the key by a fingerprint, never the key itself.
	sum := sha256.Sum256([]byte(req.Key))
	h.audit(r, "gossip keyring "+req.Op, "key "+hex.EncodeToString(sum[:4]), err)
	return kr, err
}
