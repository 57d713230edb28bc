package test

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"herd/agent"
	"herd/api"
	"herd/fsm"
	"herd/internal/pki"
	"herd/test/localcluster"
)

// awaitServerRecords waits until the leader knows every server's HTTP
// address (a forming cluster records them within a moment): it asks
// the voters whether they answer there.
func awaitServerRecords(t *testing.T, c *Cluster) {
	t.Helper()
	if !Eventually(30*time.Second, func() bool {
		conf, err := c.Client(c.WaitForLeader()).RaftConfiguration(Ctx(t, 10*time.Second))
		return err == nil && !slices.ContainsFunc(conf.Servers, func(s api.RaftServer) bool { return s.HTTPAddress == "" })
	}) {
		t.Fatal("the leader never recorded every server's HTTP address")
	}
}

// raftIDs lists the servers of the cluster's Raft configuration.
func raftIDs(t *testing.T, cl *api.Client) []string {
	t.Helper()
	conf, err := cl.RaftConfiguration(Ctx(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range conf.Servers {
		ids = append(ids, s.ID)
	}
	slices.Sort(ids)
	return ids
}

// auditSays reports whether the audit trail holds an entry of action
// whose target and outcome contain the strings given, from an address.
func auditSays(t *testing.T, cl *api.Client, action, target, outcome string) bool {
	t.Helper()
	l, err := cl.AuditLog(Ctx(t, 30*time.Second), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(l.Entries, func(e api.AuditEntry) bool {
		return e.Action == action && strings.Contains(e.Target, target) && strings.Contains(e.Outcome, outcome) && e.From != ""
	})
}

// On a cluster with TLS a server joins itself: a management token
// without a server certificate cannot add a voter (one call would move
// the quorum of three to three of four), nor can another server's
// certificate, and the server's own certificate cannot add it while
// nothing answers at its address. Each refusal is audited with who and
// from where, as is a token's refused try at another operator route;
// the configuration stays as it was. A peer's removal and a snapshot's
// restore take an operator's certificate besides the token.
func TestRaftJoinTakesTheJoiningServersOwnCertificate(t *testing.T) {
	c, dir := secureCluster(t, 3, false)
	ctx := Ctx(t, 2*time.Minute)
	addrs := httpAddrs(c)
	boot, err := secureClient(t, dir, addrs, "", nil).BootstrapACL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mgmt := secureClient(t, dir, addrs, boot.SecretID, nil)
	before := raftIDs(t, mgmt)
	// Of this build: only its silence can keep it out.
	ghost := api.JoinRequest{ID: "s9", RaftAddress: FreeAddr(t), HTTPAddress: FreeAddr(t), CommandForms: fsm.CommandForms}
	if err := mgmt.Join(ctx, ghost); statusOf(err) != 403 {
		t.Fatalf("a management token adding s9: %v, want 403", err)
	}
	other, err := localcluster.IssueTo(dir, pki.Identity{Role: pki.RoleServer, ID: "s8"})
	if err != nil {
		t.Fatal(err)
	}
	if err := secureClient(t, dir, addrs, "", &other).Join(ctx, ghost); statusOf(err) != 403 {
		t.Fatalf("server s8's certificate adding s9: %v, want 403", err)
	}
	own, err := localcluster.IssueTo(dir, pki.Identity{Role: pki.RoleServer, ID: "s9"})
	if err != nil {
		t.Fatal(err)
	}
	err = secureClient(t, dir, addrs, "", &own).Join(ctx, ghost)
	if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("s9 joining with nothing answering at its address: %v, want 409", err)
	}
	if after := raftIDs(t, mgmt); !slices.Equal(after, before) {
		t.Fatalf("the configuration changed from %v to %v", before, after)
	}
	// A peer's removal and a snapshot's restore take an operator's
	// certificate as well as the token: a leaked token alone cannot take
	// the cluster down.
	if err := mgmt.RemovePeer(ctx, "nope", false); statusOf(err) != 403 {
		t.Fatalf("a management token alone removing a peer: %v, want 403", err)
	}
	if err := mgmt.SnapshotRestore(ctx, strings.NewReader("not a snapshot")); statusOf(err) != 403 {
		t.Fatalf("a management token alone restoring a snapshot: %v, want 403", err)
	}
	alice, err := localcluster.IssueTo(dir, pki.Identity{Role: pki.RoleClient, ID: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	withCert := secureClient(t, dir, addrs, boot.SecretID, &alice)
	if err := withCert.RemovePeer(ctx, "nope", false); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("an operator's certificate and token removing an unknown peer: %v, want 404", err)
	}
	if err := withCert.SnapshotRestore(ctx, strings.NewReader("not a snapshot")); !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("an operator's certificate and token restoring garbage: %v, want 400", err)
	}
	// A token without the operator capability trying an operator route
	// is refused, and the refusal is audited too.
	readTok, err := mgmt.CreateToken(ctx, api.ACLTokenRequest{Name: "dashboards", Policies: []string{"read"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := secureClient(t, dir, addrs, readTok.SecretID, nil).RemovePeer(ctx, "s2", false); statusOf(err) != 403 {
		t.Fatalf("a read token removing a peer: %v, want 403", err)
	}
	if !Eventually(10*time.Second, func() bool {
		return auditSays(t, mgmt, "raft join", "s9", "may not add server s9") && auditSays(t, mgmt, "raft join", "s9", "does not answer") &&
			auditSays(t, mgmt, "snapshot restore", "", "with a token alone") &&
			auditSays(t, mgmt, "refused DELETE /v1/operator/raft/peer", "/v1/operator/raft/peer", "operator capability")
	}) {
		l, _ := mgmt.AuditLog(ctx, 0, 1000)
		t.Fatalf("the refusals are not in the audit trail: %+v", l.Entries)
	}
}

// Without TLS an operator may add a server, but not one that does not
// answer at the address it names.
func TestRaftJoinRefusesAServerThatDoesNotAnswer(t *testing.T) {
	c := NewCluster(t, 3)
	cl := c.AllClient()
	before := raftIDs(t, cl)
	err := cl.Join(Ctx(t, time.Minute), api.JoinRequest{ID: "s9", RaftAddress: FreeAddr(t), HTTPAddress: FreeAddr(t), CommandForms: fsm.CommandForms})
	if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("adding a server that does not answer: %v, want 409", err)
	}
	if after := raftIDs(t, cl); !slices.Equal(after, before) {
		t.Fatalf("the configuration changed from %v to %v", before, after)
	}
}

// With one follower down, removing the other (alive) one would leave two
// voters of which one answers: refused, and audited. Forced, the removal
// is made, and completes (with everything else) once the silent server
// is back. Removing a server that does not answer is never refused.
func TestRemovePeerKeepsAQuorumUnlessForced(t *testing.T) {
	c := NewCluster(t, 3)
	ctx := Ctx(t, 2*time.Minute)
	awaitServerRecords(t, c)
	leader := c.WaitForLeader()
	var followers []int
	for i := range c.Replicas {
		if i != leader {
			followers = append(followers, i)
		}
	}
	down, alive := followers[0], followers[1]
	downID, aliveID := c.Replicas[down].Cfg.ID, c.Replicas[alive].Cfg.ID
	c.Stop(down)
	cl := c.Client(leader)
	err := cl.RemovePeer(ctx, aliveID, false)
	if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "of which 1 answer ("+downID+" silent)") {
		t.Fatalf("removing the live follower with the other down: %v, want 409", err)
	}
	if !auditSays(t, cl, "raft peer remove", aliveID, "failed") {
		t.Fatal("the refused removal is not in the audit trail")
	}
	// Forced, it goes into the log. The two left, the leader and the
	// stopped server, are the configuration that must commit it: the
	// leader steps down while the stopped one is away (the answer may say
	// the outcome is unknown), and the removal completes once it is back.
	if err := cl.RemovePeer(ctx, aliveID, true); err != nil && !errors.Is(err, api.ErrNotLeader) && statusOf(err) != 503 {
		t.Fatalf("forced removal: %v", err)
	}
	c.Stop(alive)
	c.Start(down)
	c.WaitForLeader()
	submitN(t, c.AllClient(), "after", 3)
	var ids []string
	if !Eventually(30*time.Second, func() bool { ids = raftIDs(t, c.AllClient()); return !slices.Contains(ids, aliveID) && len(ids) == 2 }) {
		t.Fatalf("configuration after the forced removal: %v", ids)
	}
	if !auditSays(t, c.AllClient(), "raft peer remove", aliveID+" (forced)", "requested") {
		t.Fatal("the forced removal is not in the audit trail")
	}
}

// Removing a server that does not answer is never refused: the voters
// left are the ones that answer.
func TestRemovePeerOfASilentServer(t *testing.T) {
	c := NewCluster(t, 3)
	ctx := Ctx(t, 2*time.Minute)
	awaitServerRecords(t, c)
	leader := c.WaitForLeader()
	down := (leader + 1) % 3
	c.Stop(down)
	if err := c.Client(leader).RemovePeer(ctx, c.Replicas[down].Cfg.ID, false); err != nil {
		t.Fatalf("removing the silent server: %v", err)
	}
	submitN(t, c.AllClient(), "two", 3)
}

// A team's token (limited to its submitters) reads its own work only:
// another team's task, its explanation, logs and events, and a job of
// its tasks, are refused with 403 or left out of lists, while the
// team's own stay readable.
func TestTeamTokensReadTheirOwnWorkOnly(t *testing.T) {
	c := NewClusterWith(t, 3, Setup{Secure: true})
	a := c.StartAgent(agent.Config{ID: "edge-1", Slots: 2})
	WaitRegistered(t, a)
	ctx := Ctx(t, 2*time.Minute)
	mgmt := c.AllClient()
	team := func(name string) *api.Client {
		t.Helper()
		tok, err := mgmt.CreateToken(ctx, api.ACLTokenRequest{Name: name, Policies: []string{"submit", "read"}, Submitters: []string{name}})
		if err != nil {
			t.Fatal(err)
		}
		cl := c.AllClient()
		cl.SetToken(tok.SecretID)
		return cl
	}
	x, y := team("team-x"), team("team-y")
	spec := shSpec("x-work", "echo secret of team x")
	spec.Submitter = "team-x"
	res, _, err := x.SubmitTask(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	waitTaskState(t, x, res.ID, api.TaskSucceeded)
	jobSpec := api.JobSpec{Name: "x-job", Stages: []api.StageSpec{{Name: "one", Task: api.TaskSpec{Command: []string{"true"}, Submitter: "team-x"}}}}
	job, err := x.SubmitJob(ctx, jobSpec)
	if err != nil {
		t.Fatal(err)
	}
	if !Eventually(60*time.Second, func() bool {
		j, _, err := x.GetJob(ctx, job.ID, api.ReadOptions{})
		return err == nil && j.State == api.JobSucceeded
	}) {
		t.Fatal("team x's job never succeeded")
	}

	for name, try := range map[string]func(cl *api.Client) error{
		"get the task": func(cl *api.Client) error {
			_, _, err := cl.GetTask(ctx, res.ID, api.ReadOptions{})
			return err
		},
		"explain the task": func(cl *api.Client) error {
			_, err := cl.ExplainTask(ctx, res.ID, api.ReadOptions{})
			return err
		},
		"read the task's logs": func(cl *api.Client) error {
			return cl.TaskLog(ctx, io.Discard, res.ID, 0, 0, false)
		},
		"get the job": func(cl *api.Client) error {
			_, _, err := cl.GetJob(ctx, job.ID, api.ReadOptions{})
			return err
		},
	} {
		if err := try(x); err != nil {
			t.Errorf("team x's token: %s: %v", name, err)
		}
		if err := try(y); statusOf(err) != 403 {
			t.Errorf("team y's token: %s: %v, want 403", name, err)
		}
	}
	listed := func(cl *api.Client) bool {
		l, _, err := cl.ListTasks(ctx, api.TaskQuery{Limit: 100}, api.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(l.Tasks, func(tk api.Task) bool { return tk.ID == res.ID })
	}
	if !listed(x) || listed(y) {
		t.Errorf("the task listed to team x: %v, to team y: %v", listed(x), listed(y))
	}
	jobListed := func(cl *api.Client) bool {
		l, _, err := cl.ListJobs(ctx, "", 100, api.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(l.Jobs, func(j api.Job) bool { return j.ID == job.ID })
	}
	if !jobListed(x) || jobListed(y) {
		t.Errorf("the job listed to team x: %v, to team y: %v", jobListed(x), jobListed(y))
	}
	events := func(cl *api.Client) (task, node int) {
		err := cl.Events(ctx, api.EventQuery{}, false, func(l api.EventLine) error {
			switch {
			case l.Topic == "task" && l.Key == res.ID:
				task++
			case l.Topic == "node":
				node++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return task, node
	}
	if xt, _ := events(x); xt == 0 {
		t.Error("team x sees none of its task's events")
	}
	if yt, yn := events(y); yt != 0 || yn == 0 {
		t.Errorf("team y sees %d of team x's task events and %d node events; want none and some", yt, yn)
	}
}
