//go:build linux

package test

import (
	"context"
	"encoding/base64"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"herd/api"
	"herd/internal/pki"
	"herd/test/localcluster"
)

// The secure set-up of docs/security.md on real addresses, each process in its
// own network namespace: a server or an agent off loopback without TLS
// (and ACLs, for a server) refuses to start and says why; three servers
// with certificates, ACLs and a gossip key form a cluster; an agent with
// its node certificate registers and runs a task submitted with a token;
// without the token the same submit is refused.
func TestNetnsSecureClusterOffLoopback(t *testing.T) {
	lab := newNetnsLab(t)
	bin := buildHerd(t)
	dir := filepath.Join(lab.dir, "pki")
	if err := pki.CreateCA(dir, "", 0); err != nil {
		t.Fatal(err)
	}
	gossipKey := base64.StdEncoding.EncodeToString(bytesOf(7, 32))

	// Open off loopback: refused, with the way out named.
	probe := lab.add("open")
	out, err := exec.Command("ip", "netns", "exec", probe.ns, bin, "server", "-id", "x1", "-data-dir", filepath.Join(lab.dir, "x1"),
		"-http-addr", probe.ip+":4646", "-raft-addr", probe.ip+":4647", "-bootstrap").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "-insecure") {
		t.Fatalf("an open server off loopback started (or said nothing useful): %v\n%s", err, out)
	}
	out, err = exec.Command("ip", "netns", "exec", probe.ns, bin, "agent", "-id", "x2", "-data-dir", filepath.Join(lab.dir, "x2"),
		"-servers", "10.213.0.1:4646").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no TLS certificate") {
		t.Fatalf("an agent without TLS off loopback started (or said nothing useful): %v\n%s", err, out)
	}

	files := func(role pki.Role, id string, hosts ...string) pki.Files {
		t.Helper()
		if _, err := pki.CreateCert(dir, pki.CertRequest{Identity: pki.Identity{Role: role, ID: id}, Hosts: hosts}); err != nil {
			t.Fatal(err)
		}
		return pki.Files{CA: filepath.Join(dir, pki.CAFile), Cert: pki.CertFile(dir, id), Key: pki.KeyFile(dir, id)}
	}
	tlsFlags := func(f pki.Files) []string {
		return []string{"-tls-ca-file", f.CA, "-tls-cert-file", f.Cert, "-tls-key-file", f.Key}
	}
	_, httpAddrs, _ := lab.serversWith(bin, func(n *nsNode) []string {
		return tlsFlags(files(pki.RoleServer, n.name, n.ip))
	}, "-acl", "-gossip-key", gossipKey)
	ag := lab.add("edge1")
	lab.start(ag, bin, append([]string{"agent", "-id", "edge1", "-servers", strings.Join(httpAddrs, ","), "-data-dir", filepath.Join(lab.dir, "edge1"),
		"-gossip-addr", ag.ip + ":4648", "-gossip-key", gossipKey, "-slots", "2", "-limits", "none", "-heartbeat-interval", "1s"},
		tlsFlags(files(pki.RoleAgent, "edge1"))...)...)

	cli := lab.add("cli")
	tc, err := localcluster.ClientTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{DialContext: cli.dialer(), TLSClientConfig: tc}
	newClient := func(token string) *api.Client {
		c, err := api.NewClient(httpAddrs...)
		if err != nil {
			t.Fatal(err)
		}
		c.SetHTTPClient(&http.Client{Transport: tr, Timeout: 10 * time.Second})
		c.WithHTTPS()
		c.SetToken(token)
		c.Retries, c.RetryWait = 120, 500*time.Millisecond
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	anon := newClient("")
	boot, err := anon.BootstrapACL(ctx)
	if err != nil {
		t.Fatalf("bootstrap over TLS across namespaces: %v", err)
	}
	if _, _, err := anon.SubmitTask(ctx, api.TaskSpec{Command: []string{"true"}}); statusOf(err) != 401 {
		t.Fatalf("submit without a token: %v", err)
	}
	cl := newClient(boot.SecretID)
	if !Eventually(60*time.Second, func() bool {
		n, _, err := cl.GetNode(ctx, "edge1", api.ReadOptions{})
		return err == nil && n.Liveness == "READY"
	}) {
		t.Fatal("the agent with its certificate never became READY")
	}
	sub, _, err := cl.SubmitTask(ctx, api.TaskSpec{Command: []string{"true"}, IdempotencyKey: "secure-1"})
	if err != nil {
		t.Fatal(err)
	}
	if !Eventually(60*time.Second, func() bool {
		task, _, err := cl.GetTask(ctx, sub.ID, api.ReadOptions{Consistent: true})
		return err == nil && task.State == api.TaskSucceeded
	}) {
		t.Fatal("the task never succeeded on the secured cluster")
	}
	self, err := cl.Self(ctx)
	if err != nil || !self.TLS || !self.ACL || self.Insecure {
		t.Fatalf("status self: %+v %v", self, err)
	}
}
