package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"herd/api"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// fakeBackend is a replica for handler tests: it records every call and
// answers with canned values, or with the error set for that method.
type fakeBackend struct {
	mu         sync.Mutex
	leader     bool
	leaderAddr string // "" when no leader is known
	errs       map[string]error
	calls      []string
	created    bool // SubmitTask creates the task
	outcomes   []api.ReportOutcome
	// ACLs: enforced or not, tokens by secret hash, attempts' nodes, and
	// what was audited.
	acl          bool
	tokens       map[string]api.ACLToken
	attemptNodes map[string]string
	audited      []api.AuditEntry
}

func newFake() *fakeBackend {
	return &fakeBackend{leader: true, errs: map[string]error{}, created: true, tokens: map[string]api.ACLToken{}, attemptNodes: map[string]string{}}
}

// call records a call and returns the error set for the method.
func (f *fakeBackend) call(method string, args ...any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	parts := []string{method}
	for _, a := range args {
		parts = append(parts, fmt.Sprint(a))
	}
	f.calls = append(f.calls, strings.Join(parts, " "))
	return f.errs[method]
}

func (f *fakeBackend) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeBackend) ID() string     { return "fake1" }
func (f *fakeBackend) IsLeader() bool { return f.leader }
func (f *fakeBackend) LeaderHTTPAddress() (string, bool) {
	return f.leaderAddr, f.leaderAddr != ""
}
func (f *fakeBackend) ReadMeta() ReadMeta {
	return ReadMeta{Index: 42, LastContact: 1500 * time.Millisecond, KnownLeader: true}
}
func (f *fakeBackend) ConsistentRead(context.Context) error { return f.call("ConsistentRead") }

func (f *fakeBackend) Self() api.SelfInfo         { _ = f.call("Self"); return api.SelfInfo{ID: "fake1"} }
func (f *fakeBackend) GossipInfo() api.GossipInfo { _ = f.call("GossipInfo"); return api.GossipInfo{} }
func (f *fakeBackend) Leader() (api.LeaderInfo, error) {
	return api.LeaderInfo{ID: "fake1"}, f.call("Leader")
}
func (f *fakeBackend) RaftConfiguration() (api.RaftConfiguration, error) {
	return api.RaftConfiguration{}, f.call("RaftConfiguration")
}
func (f *fakeBackend) CheckState() api.StateCheck {
	_ = f.call("CheckState")
	return api.StateCheck{Server: "s1", OK: true}
}

func (f *fakeBackend) RaftStats() map[string]string {
	_ = f.call("RaftStats")
	return map[string]string{"state": "Leader"}
}
func (f *fakeBackend) SchedulerStatus() api.SchedulerStatus {
	_ = f.call("SchedulerStatus")
	return api.SchedulerStatus{}
}

func (f *fakeBackend) Join(_ context.Context, req api.JoinRequest) error {
	return f.call("Join", req.ID)
}
func (f *fakeBackend) RemovePeer(_ context.Context, id string, _ bool) error {
	return f.call("RemovePeer", id)
}
func (f *fakeBackend) TransferLeadership(_ context.Context, id string) error {
	return f.call("TransferLeadership", id)
}
func (f *fakeBackend) SnapshotSave(_ context.Context, w io.Writer) error {
	if err := f.call("SnapshotSave"); err != nil {
		return err
	}
	_, err := io.WriteString(w, "archive")
	return err
}
func (f *fakeBackend) SnapshotRestore(_ context.Context, r io.Reader) error {
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	return f.call("SnapshotRestore")
}

func (f *fakeBackend) SubmitTask(_ context.Context, spec api.TaskSpec) (api.Task, bool, uint64, error) {
	err := f.call("SubmitTask", spec.Name)
	return api.Task{ID: "t1", State: "PENDING"}, f.created, 7, err
}
func (f *fakeBackend) SubmitTasks(_ context.Context, specs []api.TaskSpec) (api.BatchSubmitResponse, error) {
	return api.BatchSubmitResponse{}, f.call("SubmitTasks", len(specs))
}
func (f *fakeBackend) GetTask(id string) (api.Task, error) {
	return api.Task{ID: id}, f.call("GetTask", id)
}
func (f *fakeBackend) ListTasks(q api.TaskQuery) (api.TaskList, error) {
	return api.TaskList{}, f.call("ListTasks", q.State, q.After, q.Limit)
}
func (f *fakeBackend) ExplainTask(id string) (api.Explanation, error) {
	return api.Explanation{}, f.call("ExplainTask", id)
}
func (f *fakeBackend) ExplainSpec(api.ExplainRequest) (api.Explanation, error) {
	return api.Explanation{}, f.call("ExplainSpec")
}
func (f *fakeBackend) CancelTask(_ context.Context, id, reason string) (api.Task, error) {
	return api.Task{ID: id}, f.call("CancelTask", id, reason)
}

func (f *fakeBackend) RegisterNode(_ context.Context, reg api.NodeRegistration) (api.RegisterResponse, error) {
	return api.RegisterResponse{}, f.call("RegisterNode", reg.ID)
}
func (f *fakeBackend) Heartbeat(_ context.Context, id string, _ api.HeartbeatRequest) (api.HeartbeatResponse, error) {
	return api.HeartbeatResponse{}, f.call("Heartbeat", id)
}
func (f *fakeBackend) SetNodeConditions(_ context.Context, id string, req api.NodeConditionsRequest) (api.Node, error) {
	types := make([]string, len(req.Conditions))
	for i, c := range req.Conditions {
		types[i] = c.Type
	}
	return api.Node{ID: id}, f.call("SetNodeConditions", id, req.SessionGeneration, types)
}
func (f *fakeBackend) TaskLog(_ context.Context, w http.ResponseWriter, id string, number int, tail int64, follow bool) error {
	if err := f.call("TaskLog", id, number, tail, follow); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("line 1\n"))
	return nil
}
func (f *fakeBackend) ReadEvents(q api.EventQuery) (EventPage, error) {
	if err := f.call("ReadEvents", q.From.Index, q.From.Offset, len(q.Topics)); err != nil {
		return EventPage{}, err
	}
	// Two events at index 5; the stream holds everything from index 3.
	page := EventPage{Next: api.EventPosition{Index: 6}, Complete: 3, Wait: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }}
	for _, e := range []api.Event{{Index: 5, Topic: "task", Key: "t1", Kind: "queued"}, {Index: 5, Offset: 1, Topic: "node", Key: "n1", Kind: "ready"}} {
		if !e.Position().Before(q.From) && q.Matches(e.Topic, e.Key) {
			page.Events = append(page.Events, e)
		}
	}
	return page, nil
}
func (f *fakeBackend) Metrics() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = f.call("Metrics")
		_, _ = w.Write([]byte("# HELP herd_up Whether herd is up.\n# TYPE herd_up gauge\nherd_up 1\n"))
	})
}
func (f *fakeBackend) SubmitJob(_ context.Context, spec api.JobSpec) (api.Job, bool, uint64, error) {
	err := f.call("SubmitJob", spec.Name, len(spec.Stages))
	return api.Job{ID: "j1", State: api.JobRunning}, spec.IdempotencyKey != "seen", 7, err
}
func (f *fakeBackend) GetJob(id string) (api.Job, error) {
	return api.Job{ID: id, State: api.JobRunning, Stages: []api.JobStage{{Name: "a", State: "RUNNING", TaskIDs: []string{"t1"}}}}, f.call("GetJob", id)
}
func (f *fakeBackend) ListJobs(after string, limit int) (api.JobList, error) {
	return api.JobList{Jobs: []api.Job{{ID: "j1"}}}, f.call("ListJobs", after, limit)
}
func (f *fakeBackend) CancelJob(_ context.Context, id, reason string) (api.Job, error) {
	return api.Job{ID: id, State: api.JobCancelled}, f.call("CancelJob", id, reason)
}
func (f *fakeBackend) ReportProfile(_ context.Context, id string, r api.NodeProfileReport) (api.Node, error) {
	return api.Node{ID: id}, f.call("ReportProfile", id, r.SessionGeneration, r.Profile.Cores)
}
func (f *fakeBackend) ReportDatasets(_ context.Context, id string, r api.NodeDatasetsReport) (api.Node, error) {
	return api.Node{ID: id}, f.call("ReportDatasets", id, r.SessionGeneration, len(r.Datasets))
}
func (f *fakeBackend) ReportHealthCheck(_ context.Context, id string, r api.HealthCheckReport) (api.Node, error) {
	return api.Node{ID: id}, f.call("ReportHealthCheck", id, r.Seq, r.Passed)
}
func (f *fakeBackend) SetNodeTier(_ context.Context, id string, r api.NodeTierRequest) (api.Node, error) {
	return api.Node{ID: id}, f.call("SetNodeTier", id, r.Tier)
}
func (f *fakeBackend) RequestRebench(_ context.Context, id string) (api.Node, error) {
	return api.Node{ID: id}, f.call("RequestRebench", id)
}
func (f *fakeBackend) RequestHealthCheck(_ context.Context, id string) (api.Node, error) {
	return api.Node{ID: id}, f.call("RequestHealthCheck", id)
}
func (f *fakeBackend) DrainNode(_ context.Context, id string, enable bool) (api.Node, error) {
	return api.Node{ID: id}, f.call("DrainNode", id, enable)
}
func (f *fakeBackend) SetNodeEligibility(_ context.Context, id string, eligible bool) (api.Node, error) {
	return api.Node{ID: id}, f.call("SetNodeEligibility", id, eligible)
}
func (f *fakeBackend) GetNode(id string) (api.Node, error) {
	return api.Node{ID: id}, f.call("GetNode", id)
}
func (f *fakeBackend) ListNodes() ([]api.Node, error) {
	return []api.Node{{ID: "n1"}}, f.call("ListNodes")
}
func (f *fakeBackend) PullImage(_ context.Context, id, ref string) (api.ImageLoad, error) {
	return api.ImageLoad{Images: []api.ImageLoaded{{Node: id, Names: []string{ref}, Digest: "sha256:aa"}}}, f.call("PullImage", id, ref)
}

func (f *fakeBackend) ImportImage(_ context.Context, id string, archive io.Reader, tags []string) (api.ImageLoad, error) {
	b, _ := io.ReadAll(archive)
	return api.ImageLoad{Images: []api.ImageLoaded{{Node: id, Names: tags, Digest: "sha256:bb"}}}, f.call("ImportImage", id, string(b), strings.Join(tags, ","))
}

func (f *fakeBackend) NodeImages(_ context.Context, id string) (api.ImageCache, error) {
	return api.ImageCache{Runtime: "runc 1.1.5"}, f.call("NodeImages", id)
}
func (f *fakeBackend) Assignments(_ context.Context, id string, q api.AssignmentsQuery) (api.Assignments, error) {
	return api.Assignments{NodeID: id, Index: 9}, f.call("Assignments", id, q.Index, q.Wait, q.Known)
}

func (f *fakeBackend) StartAttempt(_ context.Context, id string, _ api.AttemptStartRequest) (api.AttemptReport, error) {
	return api.AttemptReport{}, f.call("StartAttempt", id)
}
func (f *fakeBackend) CompleteAttempt(_ context.Context, id string, req api.AttemptCompleteRequest) (api.AttemptReport, error) {
	return api.AttemptReport{}, f.call("CompleteAttempt", id, req.State)
}
func (f *fakeBackend) ReportAttempts(_ context.Context, reports []api.AttemptReportItem) ([]api.ReportOutcome, error) {
	if err := f.call("ReportAttempts", len(reports)); err != nil {
		return nil, err
	}
	if f.outcomes != nil {
		return f.outcomes, nil
	}
	return make([]api.ReportOutcome, len(reports)), nil
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func (f *fakeBackend) ACLEnforced() bool { return f.acl }

func (f *fakeBackend) TokenBySecretHash(hash string) (api.ACLToken, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tokens[hash]
	return t, ok
}

func (f *fakeBackend) BootstrapACL(context.Context) (api.ACLToken, error) {
	return api.ACLToken{AccessorID: "boot", SecretID: "s"}, f.call("BootstrapACL")
}

func (f *fakeBackend) CreateToken(_ context.Context, req api.ACLTokenRequest) (api.ACLToken, error) {
	return api.ACLToken{AccessorID: "new", Policies: req.Policies}, f.call("CreateToken")
}

func (f *fakeBackend) DeleteToken(_ context.Context, id string) error {
	return f.call("DeleteToken", id)
}

func (f *fakeBackend) ListTokens() ([]api.ACLToken, error) { return nil, f.call("ListTokens") }

func (f *fakeBackend) GetToken(id string) (api.ACLToken, error) {
	return api.ACLToken{AccessorID: id}, f.call("GetToken", id)
}

func (f *fakeBackend) Audit(_ context.Context, e api.AuditEntry) error {
	f.mu.Lock()
	f.audited = append(f.audited, e)
	f.mu.Unlock()
	return nil
}

func (f *fakeBackend) AuditLog(uint64, int) ([]api.AuditEntry, error) { return nil, f.call("AuditLog") }

func (f *fakeBackend) AttemptNode(id string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.attemptNodes[id]
	return n, ok
}

func (f *fakeBackend) GossipKeyring() (api.GossipKeyring, error) {
	return api.GossipKeyring{Keys: []string{"k"}, Primary: "k"}, f.call("GossipKeyring")
}

func (f *fakeBackend) ChangeGossipKeyring(_ context.Context, req api.GossipKeyringRequest) (api.GossipKeyring, error) {
	return api.GossipKeyring{}, f.call("ChangeGossipKeyring", req.Op)
}
