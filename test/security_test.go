package test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"herd/agent"
	"herd/api"
	"herd/cluster"
	"herd/config"
	"herd/internal/pki"
	"herd/test/localcluster"
)

// secureCluster starts n replicas with TLS and ACLs, their certificates
// issued by a CA under the returned directory.
func secureCluster(t *testing.T, n int, gossip bool) (*Cluster, string) {
	t.Helper()
	dir := t.TempDir()
	if err := pki.CreateCA(dir, "", 0); err != nil {
		t.Fatal(err)
	}
	// Not Setup.Secure: these tests bootstrap the ACLs themselves.
	return NewClusterWith(t, n, Setup{Gossip: gossip, Config: []ClusterOption{secureOption(t, dir)}}), dir
}

// secureClient trusts the cluster CA, presents cert when given, and sends
// token when given.
func secureClient(t *testing.T, dir string, addrs []string, token string, cert *pki.Files) *api.Client {
	t.Helper()
	pemCA, err := os.ReadFile(filepath.Join(dir, pki.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		pair, err := tls.LoadX509KeyPair(cert.Cert, cert.Key)
		if err != nil {
			t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	cl, err := api.NewClient(addrs...)
	if err != nil {
		t.Fatal(err)
	}
	tr := api.NewTransport()
	tr.TLSClientConfig = tc
	cl.SetHTTPClient(&http.Client{Timeout: 30 * time.Second, Transport: tr})
	cl.WithHTTPS()
	cl.SetToken(token)
	cl.Retries, cl.RetryWait = 40, 250*time.Millisecond
	return cl
}

func httpAddrs(c *Cluster) []string {
	var out []string
	for _, r := range c.Replicas {
		out = append(out, r.Cfg.HTTPAddr)
	}
	return out
}

// A cluster with TLS and ACLs end to end: plain HTTP is told to use
// HTTPS; nothing works without a token but the bootstrap, which works
// once, through a follower too; tokens grant what their policies say;
// agents with certificates run tasks, and an agent's certificate used for
// another node's attempt, registration or assignments, or to join as a
// server, is refused, changes nothing, and is recorded against its node.
func TestSecureClusterEndToEnd(t *testing.T) {
	c, dir := secureCluster(t, 3, true)
	ctx := Ctx(t, 2*time.Minute)
	addrs := httpAddrs(c)
	follower := c.Follower()

	if _, err := c.Client(0).Leader(ctx); err == nil || !strings.Contains(err.Error(), "speaks HTTPS") {
		t.Fatalf("plain HTTP to a TLS replica: %v", err)
	}
	anon := secureClient(t, dir, []string{addrs[follower]}, "", nil)
	if _, _, err := anon.SubmitTask(ctx, api.TaskSpec{Command: []string{"true"}}); statusOf(err) != 401 {
		t.Fatalf("submit without a token: %v", err)
	}
	boot, err := anon.BootstrapACL(ctx)
	if err != nil || boot.SecretID == "" {
		t.Fatalf("bootstrap through a follower: %+v %v", boot, err)
	}
	if _, err := anon.BootstrapACL(ctx); statusOf(err) != 409 {
		t.Fatalf("second bootstrap: %v", err)
	}
	mgmt := secureClient(t, dir, addrs, boot.SecretID, nil)
	readTok, err := mgmt.CreateToken(ctx, api.ACLTokenRequest{Name: "dashboards", Policies: []string{"read"}})
	if err != nil {
		t.Fatal(err)
	}
	// A token made a moment ago works at once on a follower: the leader
	// answers what the follower does not hold yet.
	reader := secureClient(t, dir, []string{addrs[follower]}, readTok.SecretID, nil)
	if _, _, err := reader.ListNodes(ctx, api.ReadOptions{}); err != nil {
		t.Fatalf("read token reads: %v", err)
	}
	if _, _, err := reader.SubmitTask(ctx, api.TaskSpec{Command: []string{"true"}}); statusOf(err) != 403 || !strings.Contains(err.Error(), "submit") {
		t.Fatalf("read token submits: %v", err)
	}

	files := map[string]pki.Files{}
	for _, id := range []string{"a1", "a2"} {
		f, err := localcluster.IssueTo(dir, pki.Identity{Role: pki.RoleAgent, ID: id})
		if err != nil {
			t.Fatal(err)
		}
		files[id] = f
	}
	a1 := c.StartAgent(agent.Config{ID: "a1", TLS: files["a1"], Resources: api.Resources{CPUMillis: 2000, MemoryMB: 1024}, Slots: 2})
	a2 := c.StartAgent(agent.Config{ID: "a2", TLS: files["a2"], Resources: api.Resources{CPUMillis: 2000, MemoryMB: 1024}, Slots: 2})
	WaitRegistered(t, a1, a2)

	sub, _, err := mgmt.SubmitTask(ctx, api.TaskSpec{Command: []string{"true"}, IdempotencyKey: "ok-1"})
	if err != nil {
		t.Fatal(err)
	}
	waitTaskState(t, mgmt, sub.ID, api.TaskSucceeded)

	long, _, err := mgmt.SubmitTask(ctx, api.TaskSpec{Command: []string{"sleep", "30"}, IdempotencyKey: "long-1"})
	if err != nil {
		t.Fatal(err)
	}
	task := waitTaskState(t, mgmt, long.ID, api.TaskRunning)
	att := task.Attempts[len(task.Attempts)-1]
	other := map[string]string{"a1": "a2", "a2": "a1"}[att.NodeID]
	intruder := secureClient(t, dir, addrs, "", ptr(files[other]))
	// In this order: the first refusal is written at once, those within
	// the next second are folded into the next record (see refusalEvery).
	for _, c := range []struct {
		name string
		try  func() error
	}{
		{"complete another node's attempt", func() error {
			_, err := intruder.CompleteAttempt(ctx, att.ID, api.AttemptCompleteRequest{LeaseVersion: att.LeaseVersion, State: api.AttemptSucceeded})
			return err
		}},
		{"register another node", func() error {
			_, err := intruder.RegisterNode(ctx, api.NodeRegistration{NodeSpec: api.NodeSpec{ID: att.NodeID, Resources: api.Resources{CPUMillis: 1}, Slots: 1}})
			return err
		}},
		{"read another node's assignments", func() error {
			_, err := intruder.Assignments(ctx, att.NodeID, api.AssignmentsQuery{})
			return err
		}},
		{"join as a server", func() error {
			return intruder.Join(ctx, api.JoinRequest{ID: "s9", RaftAddress: "127.0.0.1:1", HTTPAddress: "127.0.0.1:2"})
		}},
		{"heartbeat for another node", func() error {
			_, err := intruder.Heartbeat(ctx, att.NodeID, 1)
			return err
		}},
		{"drain a node", func() error {
			_, err := intruder.DrainNode(ctx, att.NodeID, true)
			return err
		}},
		{"drain its own node (an operator's act)", func() error {
			_, err := intruder.DrainNode(ctx, other, true)
			return err
		}},
		{"set a node's tier", func() error {
			_, err := intruder.SetNodeTier(ctx, other, "L1")
			return err
		}},
		{"create a token", func() error {
			_, err := intruder.CreateToken(ctx, api.ACLTokenRequest{Name: "mine", Policies: []string{"management"}})
			return err
		}},
		{"transfer the leadership", func() error {
			_, err := intruder.TransferLeadership(ctx, "")
			return err
		}},
		{"restore a snapshot", func() error {
			return intruder.SnapshotRestore(ctx, strings.NewReader("x"))
		}},
		{"remove a peer", func() error {
			return intruder.RemovePeer(ctx, "s2", false)
		}},
		{"submit without a token", func() error {
			_, _, err := intruder.SubmitTask(ctx, api.TaskSpec{Command: []string{"true"}})
			return err
		}},
	} {
		if err := c.try(); statusOf(err) != 403 {
			t.Errorf("%s with %s's certificate: %v", c.name, other, err)
		}
	}
	if now, _, err := mgmt.GetTask(ctx, long.ID, api.ReadOptions{Consistent: true}); err != nil || now.State != api.TaskRunning {
		t.Fatalf("the refused result changed the task: %s %v", now.State, err)
	}
	if !Eventually(10*time.Second, func() bool {
		n, _, err := mgmt.GetNode(ctx, other, api.ReadOptions{Consistent: true})
		if err != nil {
			return false
		}
		for _, ev := range n.Events {
			if ev.Kind == "refused" && strings.Contains(ev.Message, att.ID) {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no refused event on node %s", other)
	}
	if _, err := mgmt.CancelTask(ctx, long.ID, "done"); err != nil {
		t.Fatal(err)
	}
	audit, err := mgmt.AuditLog(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var sawBoot, sawRefusal bool
	for _, e := range audit.Entries {
		sawBoot = sawBoot || (e.Action == "acl bootstrap" && e.Outcome == "ok")
		sawRefusal = sawRefusal || (e.Actor == "agent/"+other && e.NodeID == other)
	}
	if !sawBoot || !sawRefusal {
		t.Fatalf("audit trail lacks the bootstrap or the refusal: %+v", audit.Entries)
	}
}

// Raft takes servers only: a connection with an agent's certificate, a
// server certificate of another CA, or none, is refused; and a joining
// server from another CA cannot even reach the join endpoint.
func TestRaftRefusesPeersWithoutAServerCertificate(t *testing.T) {
	c, dir := secureCluster(t, 3, false)
	raftAddr := c.Replicas[c.WaitForLeader()].Cfg.RaftAddr
	agentFiles, err := localcluster.IssueTo(dir, pki.Identity{Role: pki.RoleAgent, ID: "sneaky"})
	if err != nil {
		t.Fatal(err)
	}
	foreign := t.TempDir()
	if err := pki.CreateCA(foreign, "", 0); err != nil {
		t.Fatal(err)
	}
	foreignFiles, err := localcluster.IssueTo(foreign, pki.Identity{Role: pki.RoleServer, ID: "s4"})
	if err != nil {
		t.Fatal(err)
	}
	refused := func(files pki.Files) error {
		m, err := pki.Load(files)
		if err != nil {
			t.Fatal(err)
		}
		ctx := Ctx(t, 10*time.Second)
		conn, err := pki.Dial(ctx, (&net.Dialer{}).DialContext, raftAddr, m.ClientConfig(pki.RoleServer))
		if err != nil {
			return err
		}
		defer conn.Close()
		// With TLS 1.3 the server judges the client's certificate after
		// the client's handshake returns: the refusal arrives on read.
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Write([]byte{0}); err != nil {
			return err
		}
		_, err = conn.Read(make([]byte, 1))
		return err
	}
	if err := refused(agentFiles); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("raft took an agent certificate: %v", err)
	}
	if err := refused(foreignFiles); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("raft took a certificate of another CA: %v", err)
	}
	plain, err := net.DialTimeout("tcp", raftAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = plain.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = plain.Write([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	if _, err := plain.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("raft answered a plain connection: %v", err)
	}
	plain.Close()

	m, err := pki.Load(foreignFiles)
	if err != nil {
		t.Fatal(err)
	}
	tr := api.NewTransport()
	tr.DialTLSContext = func(ctx context.Context, _, addr string) (net.Conn, error) {
		return pki.Dial(ctx, (&net.Dialer{}).DialContext, addr, m.ClientConfig(pki.RoleServer))
	}
	cl, err := api.NewClient(httpAddrs(c)[0])
	if err != nil {
		t.Fatal(err)
	}
	cl.SetHTTPClient(&http.Client{Transport: tr, Timeout: 10 * time.Second})
	cl.WithHTTPS()
	if err := cl.Join(Ctx(t, 10*time.Second), api.JoinRequest{ID: "s4", RaftAddress: "127.0.0.1:1", HTTPAddress: "127.0.0.1:2"}); err == nil || statusOf(err) != 0 {
		t.Errorf("a server of another CA reached the join endpoint: %v", err)
	}
	f := c.Server(0).Raft().GetConfiguration()
	if err := f.Error(); err != nil || len(f.Configuration().Servers) != 3 {
		t.Fatalf("configuration changed: %+v %v", f.Configuration(), err)
	}

	// A replica of another CA added to the configuration by hand (as a
	// non-voter, so the quorum stays) never receives an entry: the
	// leader's connections to it fail their handshake both ways.
	cfg := config.DefaultServer()
	cfg.ID, cfg.DataDir, cfg.LogLevel = "s4", t.TempDir(), "off"
	cfg.HTTPAddr, cfg.RaftAddr = FreeAddr(t), FreeAddr(t)
	cfg.TLSCAFile, cfg.TLSCertFile, cfg.TLSKeyFile, cfg.ACL = foreignFiles.CA, foreignFiles.Cert, foreignFiles.Key, true
	FastRaft(&cfg)
	s4, err := cluster.Start(cfg, cluster.Options{Logger: TestLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s4.Shutdown()
	leader := c.Server(c.WaitForLeader())
	if err := leader.Raft().AddNonvoter("s4", raft.ServerAddress(cfg.RaftAddr), 0, 10*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	// New entries commit on the cluster meanwhile.
	for i := 0; i < 3; i++ {
		if err := leader.Raft().Barrier(10 * time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	// Absence can only be shown over a while: the leader retries a
	// follower it cannot reach with backoff, several times in 3 s.
	if Eventually(3*time.Second, func() bool { return s4.Raft().LastIndex() > 0 }) {
		t.Fatalf("the foreign replica received entries up to %d", s4.Raft().LastIndex())
	}
	if err := leader.Raft().RemoveServer("s4", 0, 10*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
}

// Certificates rotated on every replica in turn, while clients submit: no
// acknowledged task is lost, no error but retryable ones, and each
// replica serves its new certificate to new connections.
func TestCertificateRotationUnderLoad(t *testing.T) {
	c, dir := secureCluster(t, 3, false)
	ctx := Ctx(t, 2*time.Minute)
	anon := secureClient(t, dir, httpAddrs(c), "", nil)
	boot, err := anon.BootstrapACL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cl := secureClient(t, dir, httpAddrs(c), boot.SecretID, nil)

	const total = 300
	load := startSubmitLoad(ctx, cl, "rot", total)
	for i, r := range c.Replicas {
		// Wait for some load between rotations.
		Eventually(30*time.Second, func() bool { return load.reached((i + 1) * total / 4) })
		if _, err := pki.CreateCert(dir, pki.CertRequest{Identity: pki.Identity{Role: pki.RoleServer, ID: r.Cfg.ID}}); err != nil {
			t.Fatal(err)
		}
		if err := c.Server(i).ReloadTLS(); err != nil {
			t.Fatalf("reload %s: %v", r.Cfg.ID, err)
		}
		want := serialOf(t, r.Cfg.TLSCertFile)
		conn, err := tls.Dial("tcp", r.Cfg.HTTPAddr, &tls.Config{RootCAs: poolOf(t, dir), ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatalf("new connection to %s after rotation: %v", r.Cfg.ID, err)
		}
		got := conn.ConnectionState().PeerCertificates[0].SerialNumber
		conn.Close()
		if got.Cmp(want) != 0 {
			t.Fatalf("%s serves serial %v after reload, want %v", r.Cfg.ID, got, want)
		}
	}
	acked, err := load.wait()
	if err != nil {
		t.Fatalf("non-retryable error during rotation: %v", err)
	}
	for _, id := range acked {
		if _, _, err := cl.GetTask(ctx, id, api.ReadOptions{Consistent: true}); err != nil {
			t.Fatalf("acknowledged task %s lost: %v", id, err)
		}
	}
	if len(acked) != total {
		t.Fatalf("%d of %d acknowledged", len(acked), total)
	}
}

func serialOf(t *testing.T, path string) *big.Int {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(raw)
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert.SerialNumber
}

func poolOf(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, pki.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(raw)
	return pool
}
