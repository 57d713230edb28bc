package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"herd/internal/version"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Client talks to a herd cluster through any of its replicas. A request
// that finds a replica unreachable, or without a leader, moves on to the
// next address; followers forward to the leader themselves.
type Client struct {
	addrs []string
	// explicit: the address was given with its scheme.
	explicit []bool
	http     *http.Client
	// preferred is the index of the address that answered last; requests
	// start there, so a dead replica costs one failure, not one per call.
	preferred atomic.Int32
	// leader is the index of the address a follower last named as the
	// leader's (HeaderLeaderAddress), plus one (0: none known). Writes
	// start there; reads stay where they are, any replica answers them.
	leader atomic.Int32
	// OnFailover, when set, is told when a request moves to another
	// replica because the previous one failed.
	OnFailover func(from, to string, err error)
	// Retries is how many extra rounds over all addresses a request makes
	// while the cluster has no leader (during an election).
	Retries int
	// RetryWait is the pause between rounds.
	RetryWait time.Duration
	// token goes with every request (X-Herd-Token).
	token string
}

// SetToken makes every request carry the ACL token secret.
func (c *Client) SetToken(secret string) { c.token = secret }

// WithHTTPS turns the addresses given without a scheme to https (a
// client that trusts the cluster's CA).
func (c *Client) WithHTTPS() {
	for i, a := range c.addrs {
		if !c.explicit[i] {
			c.addrs[i] = "https://" + strings.TrimPrefix(a, "http://")
		}
	}
}

// NewTransport returns the HTTP transport herd's clients, agents and
// replicas use among themselves: the standard one, except that it keeps
// up to 64 idle connections per server instead of 2, so an agent or a
// follower with dozens of requests in flight reuses connections instead
// of opening (and leaving in TIME_WAIT) a new one for most of them.
func NewTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return t
}

// NewClient returns a client for the given addresses ("host:port" or URLs).
func NewClient(addrs ...string) (*Client, error) {
	c := &Client{http: &http.Client{Timeout: 60 * time.Second, Transport: NewTransport()}, Retries: 0, RetryWait: 500 * time.Millisecond}
	for _, a := range addrs {
		for _, p := range strings.Split(a, ",") {
			p = strings.TrimSpace(p)
			if p == "" {
				continue
			}
			c.explicit = append(c.explicit, strings.Contains(p, "://"))
			if !strings.Contains(p, "://") {
				p = "http://" + p
			}
			u, err := url.Parse(p)
			if err != nil || u.Host == "" {
				return nil, fmt.Errorf("invalid server address %q", p)
			}
			c.addrs = append(c.addrs, strings.TrimRight(u.String(), "/"))
		}
	}
	if len(c.addrs) == 0 {
		return nil, errors.New("no server address given")
	}
	return c, nil
}

// noteLeader remembers which of the client's addresses is the leader's
// HTTP address (host:port), when one is.
func (c *Client) noteLeader(hostport string) {
	for i, a := range c.addrs {
		if u, err := url.Parse(a); err == nil && u.Host == hostport {
			c.leader.Store(int32(i) + 1)
			return
		}
	}
}

// Addresses returns the base URLs the client uses.
func (c *Client) Addresses() []string { return append([]string(nil), c.addrs...) }

// SetHTTPClient replaces the underlying HTTP client (timeouts, transports).
func (c *Client) SetHTTPClient(h *http.Client) { c.http = h }

// Response metadata returned with reads.
type Meta struct {
	Index       uint64
	LastContact time.Duration
	KnownLeader bool
	Status      int
	// LeaderAddress is the leader's HTTP address when a follower
	// forwarded the request (HeaderLeaderAddress).
	LeaderAddress string
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) (Meta, error) {
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return Meta{}, fmt.Errorf("encode request: %w", err)
		}
		body = b
	}
	var lastErr error
	for round := 0; round <= c.Retries; round++ {
		if round > 0 && misconfigured(lastErr) {
			break // every address was asked; asking again cannot help
		}
		if round > 0 {
			select {
			case <-ctx.Done():
				return Meta{}, ctx.Err()
			case <-time.After(c.RetryWait):
			}
		}
		start := int(c.preferred.Load())
		if l := int(c.leader.Load()) - 1; l >= 0 && method != http.MethodGet {
			start = l
		}
		for i := range c.addrs {
			k := (start + i) % len(c.addrs)
			base := c.addrs[k]
			meta, err := c.once(ctx, method, base+path, body, out)
			if err == nil {
				if method != http.MethodGet && meta.LeaderAddress == "" && k != start {
					// Answered without forwarding elsewhere than the
					// leader we knew: that one is stale.
					c.leader.Store(0)
				}
				if k != start {
					c.preferred.Store(int32(k))
					if c.OnFailover != nil {
						c.OnFailover(c.addrs[start], base, lastErr)
					}
				}
				return meta, nil
			}
			lastErr = err
			var se *StatusError
			if errors.As(err, &se) && se.Code != http.StatusServiceUnavailable {
				return meta, err // a real answer: do not ask elsewhere
			}
			if ctx.Err() != nil {
				return meta, ctx.Err()
			}
		}
	}
	return Meta{}, lastErr
}

func (c *Client) once(ctx context.Context, method, u string, body []byte, out any) (Meta, error) {
	return c.onceWith(c.http, ctx, method, u, body, out)
}

// onceWith is once through hc (a follow has no overall timeout).
func (c *Client) onceWith(hc *http.Client, ctx context.Context, method, u string, body []byte, out any) (Meta, error) {
	if body != nil {
		return c.onceReader(hc, ctx, method, u, bytes.NewReader(body), "application/json", out)
	}
	return c.onceReader(hc, ctx, method, u, nil, "", out)
}

// onceReader sends one request with the body rd (nil: none) of
// contentType and decodes the answer into out (an io.Writer receives it
// as it is).
func (c *Client) onceReader(hc *http.Client, ctx context.Context, method, u string, rd io.Reader, contentType string, out any) (Meta, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return Meta{}, fmt.Errorf("build request: %w", err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set(HeaderToken, c.token)
	}
	req.Header.Set(HeaderVersion, version.Version())
	resp, err := hc.Do(req)
	if err != nil {
		return Meta{}, fmt.Errorf("%s %s: %w", method, u, err)
	}
	defer resp.Body.Close()
	meta := parseMeta(resp)
	if meta.LeaderAddress != "" {
		c.noteLeader(meta.LeaderAddress)
	}
	if resp.StatusCode >= 300 {
		return meta, decodeError(resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return meta, nil
	}
	if w, ok := out.(io.Writer); ok {
		if _, err := io.Copy(w, resp.Body); err != nil {
			return meta, fmt.Errorf("read %s: %w", u, err)
		}
		return meta, nil
	}
	buf := answerBuffers.Get().(*bytes.Buffer)
	defer putAnswerBuffer(buf)
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return meta, fmt.Errorf("read %s: %w", u, err)
	}
	// Unmarshal copies what it keeps, so the buffer can be reused.
	if err := json.Unmarshal(buf.Bytes(), out); err != nil {
		return meta, fmt.Errorf("decode answer of %s: %w", u, err)
	}
	return meta, nil
}

// misconfigured reports whether err is the client's TLS set-up failing
// against the server's (an unknown CA, a certificate for another name,
// HTTPS to a plain server or plain HTTP to an HTTPS one): a retry gets the
// same answer, so none is made.
func misconfigured(err error) bool {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		record   tls.RecordHeaderError
	)
	if err == nil {
		return false
	}
	return errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &verify) ||
		errors.As(err, &record) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")
}

// answerBuffers hold answers while they are decoded, so that an agent's
// long polls do not grow a fresh decoder buffer for every answer.
var answerBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// putAnswerBuffer keeps buffers of ordinary answers; one that held a
// large listing is left to the collector.
func putAnswerBuffer(b *bytes.Buffer) {
	if b.Cap() > 1<<20 {
		return
	}
	b.Reset()
	answerBuffers.Put(b)
}

func parseMeta(resp *http.Response) Meta {
	m := Meta{Status: resp.StatusCode}
	m.Index, _ = strconv.ParseUint(resp.Header.Get(HeaderIndex), 10, 64)
	if ms, err := strconv.ParseInt(resp.Header.Get(HeaderLastContact), 10, 64); err == nil {
		m.LastContact = time.Duration(ms) * time.Millisecond
	}
	m.KnownLeader, _ = strconv.ParseBool(resp.Header.Get(HeaderKnownLeader))
	m.LeaderAddress = resp.Header.Get(HeaderLeaderAddress)
	return m
}

func decodeError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e ErrorResponse
	if resp.StatusCode == http.StatusBadRequest && strings.Contains(string(raw), "Client sent an HTTP request to an HTTPS server") {
		return &StatusError{Code: resp.StatusCode, Message: "the server speaks HTTPS: use an https:// address and trust the cluster CA (-ca-file or HERD_CACERT)"}
	}
	if err := json.Unmarshal(raw, &e); err != nil || e.Error == "" {
		e.Error = strings.TrimSpace(string(raw))
		if e.Error == "" {
			e.Error = resp.Status
		}
	}
	return &StatusError{Code: resp.StatusCode, Message: e.Error, Reason: e.Code}
}

// Leader returns the current leader.
func (c *Client) Leader(ctx context.Context) (LeaderInfo, error) {
	var l LeaderInfo
	_, err := c.do(ctx, http.MethodGet, "/v1/status/leader", nil, &l)
	return l, err
}

// Self describes the first replica that answers.
func (c *Client) Self(ctx context.Context) (SelfInfo, error) {
	var s SelfInfo
	_, err := c.do(ctx, http.MethodGet, "/v1/status/self", nil, &s)
	return s, err
}

// RaftConfiguration returns the cluster membership.
func (c *Client) RaftConfiguration(ctx context.Context) (RaftConfiguration, error) {
	var rc RaftConfiguration
	_, err := c.do(ctx, http.MethodGet, "/v1/operator/raft/configuration", nil, &rc)
	return rc, err
}

// SchedulerStatus returns the leader's scheduling counters and queue.
func (c *Client) SchedulerStatus(ctx context.Context) (SchedulerStatus, error) {
	var s SchedulerStatus
	_, err := c.do(ctx, http.MethodGet, "/v1/operator/scheduler", nil, &s)
	return s, err
}

// RaftStats returns the raft statistics of the first replica that answers.
func (c *Client) RaftStats(ctx context.Context) (map[string]string, error) {
	var s map[string]string
	_, err := c.do(ctx, http.MethodGet, "/v1/operator/raft/stats", nil, &s)
	return s, err
}

// CheckState asks the replica the client reaches first to check the
// invariants of its applied state; a client per server asks each.
func (c *Client) CheckState(ctx context.Context) (StateCheck, error) {
	var s StateCheck
	_, err := c.do(ctx, http.MethodGet, "/v1/operator/debug/check-state", nil, &s)
	return s, err
}

// Join asks the cluster to add a server as a voter.
func (c *Client) Join(ctx context.Context, req JoinRequest) error {
	_, err := c.do(ctx, http.MethodPost, "/v1/operator/raft/join", req, nil)
	return err
}

// RemovePeer removes a server from the Raft configuration. Unless force
// is set, the leader refuses a removal that would leave the voters
// without a quorum among those that answer.
func (c *Client) RemovePeer(ctx context.Context, id string, force bool) error {
	q := url.Values{"id": {id}}
	if force {
		q.Set("force", "true")
	}
	_, err := c.do(ctx, http.MethodDelete, "/v1/operator/raft/peer?"+q.Encode(), nil, nil)
	return err
}

// TransferLeadership asks the leader to hand over to another voter (to
// targetID when set) and returns the new leader.
func (c *Client) TransferLeadership(ctx context.Context, targetID string) (LeaderInfo, error) {
	path := "/v1/operator/raft/transfer-leadership"
	if targetID != "" {
		path += "?id=" + url.QueryEscape(targetID)
	}
	var l LeaderInfo
	_, err := c.do(ctx, http.MethodPut, path, nil, &l)
	return l, err
}

// SnapshotSave streams a snapshot archive from the leader into w.
func (c *Client) SnapshotSave(ctx context.Context, w io.Writer) error {
	return c.streamInto(ctx, c.http, "/v1/operator/snapshot", w)
}

// streamInto copies a GET of path into w from the first replica that
// answers it. The body is streamed, so retrying after a partial copy
// would corrupt w: another replica is asked only while nothing was
// written and the last one could not answer (503 or unreachable).
func (c *Client) streamInto(ctx context.Context, hc *http.Client, path string, w io.Writer) error {
	cw := &countingWriter{w: w}
	var lastErr error
	for _, base := range c.addrs {
		_, err := c.onceWith(hc, ctx, http.MethodGet, base+path, nil, cw)
		if err == nil {
			return nil
		}
		lastErr = err
		var se *StatusError
		if cw.n > 0 || (errors.As(err, &se) && se.Code != http.StatusServiceUnavailable) {
			return err
		}
	}
	return lastErr
}

// SnapshotRestore uploads a snapshot archive to the leader.
func (c *Client) SnapshotRestore(ctx context.Context, r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("read snapshot: %w", err)
	}
	var lastErr error
	for _, base := range c.addrs {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/v1/operator/snapshot", bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("build request: %w", err)
		}
		req.Header.Set("Content-Type", "application/octet-stream")
		if c.token != "" {
			req.Header.Set(HeaderToken, c.token)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			lastErr = fmt.Errorf("PUT %s: %w", base, err)
			continue
		}
		if resp.StatusCode >= 300 {
			lastErr = decodeError(resp)
			resp.Body.Close()
			var se *StatusError
			if errors.As(lastErr, &se) && se.Code != http.StatusServiceUnavailable {
				return lastErr
			}
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil
	}
	return lastErr
}

// SubmitTask submits a task; created is false when the idempotency key
// matched an existing task.
func (c *Client) SubmitTask(ctx context.Context, spec TaskSpec) (SubmitResponse, bool, error) {
	var out SubmitResponse
	meta, err := c.do(ctx, http.MethodPost, "/v1/tasks", spec, &out)
	return out, meta.Status == http.StatusCreated, err
}

// SubmitTasks submits up to MaxBatchTasks tasks in one request and one
// Raft entry. Give each an idempotency key: a retry after an unknown
// outcome then answers the tasks already created instead of duplicating.
func (c *Client) SubmitTasks(ctx context.Context, specs []TaskSpec) (BatchSubmitResponse, error) {
	var out BatchSubmitResponse
	_, err := c.do(ctx, http.MethodPost, "/v1/tasks/batch", BatchSubmitRequest{Tasks: specs}, &out)
	return out, err
}

// ReadOptions control how a read is served.
type ReadOptions struct {
	// Consistent makes the leader confirm its leadership and catch up
	// before answering (linearizable); otherwise any replica answers from
	// its local state (possibly stale; see Meta).
	Consistent bool
}

func (o ReadOptions) query(q url.Values) string {
	if o.Consistent {
		q.Set("consistent", "")
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + strings.ReplaceAll(q.Encode(), "consistent=", "consistent")
}

// GetTask returns one task.
func (c *Client) GetTask(ctx context.Context, id string, o ReadOptions) (Task, Meta, error) {
	var t Task
	meta, err := c.do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(id)+o.query(url.Values{}), nil, &t)
	return t, meta, err
}

// ListTasks returns one page of tasks.
func (c *Client) ListTasks(ctx context.Context, q TaskQuery, o ReadOptions) (TaskList, Meta, error) {
	v := url.Values{}
	if q.State != "" {
		v.Set("state", q.State)
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var l TaskList
	meta, err := c.do(ctx, http.MethodGet, "/v1/tasks"+o.query(v), nil, &l)
	return l, meta, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// RegisterNode registers (or re-registers) a node and returns its new
// session generation.
func (c *Client) RegisterNode(ctx context.Context, reg NodeRegistration) (RegisterResponse, error) {
	var out RegisterResponse
	_, err := c.do(ctx, http.MethodPost, "/v1/nodes/register", reg, &out)
	return out, err
}

// Heartbeat keeps a node's session alive and says how the cluster sees
// the node.
func (c *Client) Heartbeat(ctx context.Context, nodeID string, session uint64) (HeartbeatResponse, error) {
	return c.HeartbeatWith(ctx, nodeID, HeartbeatRequest{SessionGeneration: session})
}

// HeartbeatWith sends a heartbeat with everything the agent reports.
func (c *Client) HeartbeatWith(ctx context.Context, nodeID string, req HeartbeatRequest) (HeartbeatResponse, error) {
	var out HeartbeatResponse
	_, err := c.do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(nodeID)+"/heartbeat", req, &out)
	return out, err
}

// GossipKeyring reads the gossip pool's keyring (operators and agents).
func (c *Client) GossipKeyring(ctx context.Context) (GossipKeyring, error) {
	var kr GossipKeyring
	_, err := c.do(ctx, http.MethodGet, "/v1/operator/gossip/keyring", nil, &kr)
	return kr, err
}

// ChangeGossipKeyring installs, uses or removes a key (base64).
func (c *Client) ChangeGossipKeyring(ctx context.Context, op, key string) (GossipKeyring, error) {
	var kr GossipKeyring
	_, err := c.do(ctx, http.MethodPost, "/v1/operator/gossip/keyring", GossipKeyringRequest{Op: op, Key: key}, &kr)
	return kr, err
}

// SetNodeConditions replaces the conditions nodeID's agent reports for
// its session (none says nothing is wrong) and adds its notes to the
// node's events.
func (c *Client) SetNodeConditions(ctx context.Context, nodeID string, session uint64, conds []NodeCondition, notes ...string) (Node, error) {
	if conds == nil {
		conds = []NodeCondition{}
	}
	var out Node
	_, err := c.do(ctx, http.MethodPut, "/v1/nodes/"+url.PathEscape(nodeID)+"/conditions", NodeConditionsRequest{SessionGeneration: session, Conditions: conds, Notes: notes}, &out)
	return out, err
}

// StartAttempt reports that an attempt starts.
func (c *Client) StartAttempt(ctx context.Context, id string, lease uint64) (AttemptReport, error) {
	var out AttemptReport
	_, err := c.do(ctx, http.MethodPost, "/v1/attempts/"+url.PathEscape(id)+"/start", AttemptStartRequest{LeaseVersion: lease}, &out)
	return out, err
}

// CompleteAttempt reports how an attempt ended.
func (c *Client) CompleteAttempt(ctx context.Context, id string, req AttemptCompleteRequest) (AttemptReport, error) {
	var out AttemptReport
	_, err := c.do(ctx, http.MethodPost, "/v1/attempts/"+url.PathEscape(id)+"/complete", req, &out)
	return out, err
}

// ReportAttempts sends several starts and results in one request (one
// Raft entry); each result answers its report as its single request
// would have (see AttemptReportResult.Err).
func (c *Client) ReportAttempts(ctx context.Context, reports []AttemptReportItem) ([]AttemptReportResult, error) {
	var out AttemptReportBatchResponse
	if _, err := c.do(ctx, http.MethodPost, "/v1/attempts/reports", AttemptReportBatch{Reports: reports}, &out); err != nil {
		return nil, err
	}
	if len(out.Results) != len(reports) {
		return nil, fmt.Errorf("report batch: %d answers for %d reports", len(out.Results), len(reports))
	}
	return out.Results, nil
}

// CancelTask cancels a task and stops its running attempt.
func (c *Client) CancelTask(ctx context.Context, id, reason string) (Task, error) {
	var out Task
	_, err := c.do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(id)+"/cancel", CancelRequest{Reason: reason}, &out)
	return out, err
}

// Assignments waits up to wait for the node's attempts to change after
// index and returns its live attempts (a blocking query).
func (c *Client) Assignments(ctx context.Context, nodeID string, aq AssignmentsQuery) (Assignments, error) {
	var out Assignments
	q := url.Values{}
	q.Set("index", strconv.FormatUint(aq.Index, 10))
	q.Set("wait", aq.Wait.String())
	if aq.Known != "" {
		q.Set("known", aq.Known)
	}
	if aq.Held > 0 {
		q.Set("held", strconv.FormatUint(aq.Held, 10))
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/nodes/"+url.PathEscape(nodeID)+"/assignments?"+q.Encode(), nil, &out)
	return out, err
}

// DrainNode stops (enable) or resumes new placements on a node.
func (c *Client) DrainNode(ctx context.Context, nodeID string, enable bool) (Node, error) {
	var n Node
	_, err := c.do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(nodeID)+"/drain", DrainRequest{Enable: enable}, &n)
	return n, err
}

// SetNodeEligibility marks a node eligible or not for new attempts.
func (c *Client) SetNodeEligibility(ctx context.Context, nodeID string, eligible bool) (Node, error) {
	var n Node
	_, err := c.do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(nodeID)+"/eligibility", EligibilityRequest{Eligible: eligible}, &n)
	return n, err
}

// GetNode returns one node with its attempts.
func (c *Client) GetNode(ctx context.Context, id string, o ReadOptions) (Node, Meta, error) {
	var n Node
	meta, err := c.do(ctx, http.MethodGet, "/v1/nodes/"+url.PathEscape(id)+o.query(url.Values{}), nil, &n)
	return n, meta, err
}

// ListNodes returns every node.
func (c *Client) ListNodes(ctx context.Context, o ReadOptions) ([]Node, Meta, error) {
	var out struct {
		Nodes []Node `json:"nodes"`
	}
	meta, err := c.do(ctx, http.MethodGet, "/v1/nodes"+o.query(url.Values{}), nil, &out)
	return out.Nodes, meta, err
}

// NodeImages asks a node's agent, through a replica, about its container
// runtime and image cache.
func (c *Client) NodeImages(ctx context.Context, id string) (ImageCache, error) {
	var out ImageCache
	_, err := c.do(ctx, http.MethodGet, "/v1/nodes/"+url.PathEscape(id)+"/images", nil, &out)
	return out, err
}

// ExplainTask says why a task waits (or where it would go), node by node.
func (c *Client) ExplainTask(ctx context.Context, id string, o ReadOptions) (Explanation, error) {
	var ex Explanation
	_, err := c.do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(id)+"/explain"+o.query(url.Values{}), nil, &ex)
	return ex, err
}

// Explain evaluates a task spec that is not submitted (a what-if).
func (c *Client) Explain(ctx context.Context, req ExplainRequest, o ReadOptions) (Explanation, error) {
	var ex Explanation
	_, err := c.do(ctx, http.MethodPost, "/v1/explain"+o.query(url.Values{}), req, &ex)
	return ex, err
}

// GossipInfo says where agents join the gossip pool (no servers: the
// cluster runs without gossip).
func (c *Client) GossipInfo(ctx context.Context) (GossipInfo, error) {
	var g GossipInfo
	_, err := c.do(ctx, http.MethodGet, "/v1/status/gossip", nil, &g)
	return g, err
}

// BootstrapACL creates the cluster's first management token (once).
func (c *Client) BootstrapACL(ctx context.Context) (ACLToken, error) {
	var t ACLToken
	_, err := c.do(ctx, http.MethodPost, "/v1/acl/bootstrap", nil, &t)
	return t, err
}

// CreateToken creates a token; the answer holds its secret.
func (c *Client) CreateToken(ctx context.Context, req ACLTokenRequest) (ACLToken, error) {
	var t ACLToken
	_, err := c.do(ctx, http.MethodPost, "/v1/acl/tokens", req, &t)
	return t, err
}

// ListTokens lists tokens without their secrets. The leader answers,
// after confirming its leadership, so a token just created or deleted
// through any replica shows as such (a follower may not have applied it
// yet).
func (c *Client) ListTokens(ctx context.Context) ([]ACLToken, error) {
	var out struct {
		Tokens []ACLToken `json:"tokens"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/acl/tokens?consistent", nil, &out)
	return out.Tokens, err
}

// DeleteToken deletes a token by accessor id.
func (c *Client) DeleteToken(ctx context.Context, accessor string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/acl/tokens/"+url.PathEscape(accessor), nil, nil)
	return err
}

// TokenSelf says which token the client holds.
func (c *Client) TokenSelf(ctx context.Context) (ACLToken, error) {
	var t ACLToken
	_, err := c.do(ctx, http.MethodGet, "/v1/acl/token/self", nil, &t)
	return t, err
}

// AuditLog lists the audit trail after index.
// The leader answers, after confirming its leadership, so a record just
// committed is in the list (a follower may not have applied it yet).
func (c *Client) AuditLog(ctx context.Context, after uint64, limit int) (AuditList, error) {
	var l AuditList
	_, err := c.do(ctx, http.MethodGet, fmt.Sprintf("/v1/operator/audit?consistent&after=%d&limit=%d", after, limit), nil, &l)
	return l, err
}

// ReportProfile commits a new measurement of nodeID for its session.
func (c *Client) ReportProfile(ctx context.Context, nodeID string, session uint64, p NodeProfile) (Node, error) {
	var out Node
	_, err := c.do(ctx, http.MethodPut, "/v1/nodes/"+url.PathEscape(nodeID)+"/profile", NodeProfileReport{SessionGeneration: session, Profile: p}, &out)
	return out, err
}

// ReportDatasets replaces the datasets nodeID holds.
func (c *Client) ReportDatasets(ctx context.Context, nodeID string, session uint64, ds []Dataset) (Node, error) {
	if ds == nil {
		ds = []Dataset{}
	}
	var out Node
	_, err := c.do(ctx, http.MethodPut, "/v1/nodes/"+url.PathEscape(nodeID)+"/datasets", NodeDatasetsReport{SessionGeneration: session, Datasets: ds}, &out)
	return out, err
}

// ReportHealthCheck answers health check r.Seq of nodeID.
func (c *Client) ReportHealthCheck(ctx context.Context, nodeID string, r HealthCheckReport) (Node, error) {
	var out Node
	_, err := c.do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(nodeID)+"/health-check", r, &out)
	return out, err
}

// Probe asks a server for bytes of zeros on nodeID's behalf, to measure
// the link: it returns how long the request took, from sending it to the
// last byte.
func (c *Client) Probe(ctx context.Context, nodeID string, bytes int) (time.Duration, error) {
	start := time.Now()
	err := c.streamInto(ctx, c.http, "/v1/nodes/"+url.PathEscape(nodeID)+"/probe?bytes="+strconv.Itoa(bytes), io.Discard)
	return time.Since(start), err
}

// RequestHealthCheck asks nodeID's agent to run its health check.
func (c *Client) RequestHealthCheck(ctx context.Context, nodeID string) (Node, error) {
	var out Node
	_, err := c.do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(nodeID)+"/health-check/request", struct{}{}, &out)
	return out, err
}

// SetNodeTier pins nodeID's tier ("L1", "L2", "L3") or unpins it ("auto").
func (c *Client) SetNodeTier(ctx context.Context, nodeID, tier string) (Node, error) {
	var out Node
	_, err := c.do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(nodeID)+"/tier", NodeTierRequest{Tier: tier}, &out)
	return out, err
}

// RequestRebench asks nodeID's agent to measure its node again.
func (c *Client) RequestRebench(ctx context.Context, nodeID string) (Node, error) {
	var out Node
	_, err := c.do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(nodeID)+"/rebench", struct{}{}, &out)
	return out, err
}

// SubmitJob submits a job; the same idempotency key returns the job it
// made.
func (c *Client) SubmitJob(ctx context.Context, spec JobSpec) (JobSubmitResponse, error) {
	var out JobSubmitResponse
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs", spec, &out)
	return out, err
}

// GetJob reads a job with its stages and their tasks.
func (c *Client) GetJob(ctx context.Context, id string, o ReadOptions) (Job, Meta, error) {
	var out Job
	meta, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+o.query(url.Values{}), nil, &out)
	return out, meta, err
}

// ListJobs lists jobs after the given id.
func (c *Client) ListJobs(ctx context.Context, after string, limit int, o ReadOptions) (JobList, Meta, error) {
	var out JobList
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	q.Set("limit", strconv.Itoa(limit))
	meta, err := c.do(ctx, http.MethodGet, "/v1/jobs"+o.query(q), nil, &out)
	return out, meta, err
}

// CancelJob cancels a job and its live stages.
func (c *Client) CancelJob(ctx context.Context, id, reason string) (Job, error) {
	var out Job
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/cancel", CancelRequest{Reason: reason}, &out)
	return out, err
}

// TaskLog writes an attempt's log (attempt 0: the latest) to w, as the
// node that ran it keeps it: the last tail bytes when tail > 0, and with
// follow what the attempt writes until it ends. A replica that cannot be
// reached is left for the next only while nothing was written.
func (c *Client) TaskLog(ctx context.Context, w io.Writer, taskID string, attempt int, tail int64, follow bool) error {
	q := url.Values{}
	if attempt > 0 {
		q.Set("attempt", strconv.Itoa(attempt))
	}
	if tail > 0 {
		q.Set("tail", strconv.FormatInt(tail, 10))
	}
	if follow {
		q.Set("follow", "true")
	}
	hc := c.http
	if follow {
		// A followed log stays open as long as its attempt runs.
		hc = &http.Client{Transport: c.http.Transport}
	}
	return c.streamInto(ctx, hc, "/v1/tasks/"+url.PathEscape(taskID)+"/logs?"+q.Encode(), w)
}
