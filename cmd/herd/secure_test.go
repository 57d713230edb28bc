package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"herd/api"
	"herd/config"
	"herd/test"
)

// The secure set-up as docs/security.md gives it, through the CLI: certificates
// without openssl, a cluster with TLS and ACLs, bootstrap once, tokens.
func TestCLISecureSetup(t *testing.T) {
	dir := t.TempDir()
	herd := func(vars map[string]string, args ...string) (string, string, int) {
		e, out, errb := testEnv(vars)
		code := run(e, args)
		return out.String(), errb.String(), code
	}
	if _, errOut, code := herd(nil, "tls", "ca", "create", "-dir", dir); code != 0 {
		t.Fatalf("ca create: %d %s", code, errOut)
	}
	if _, errOut, code := herd(nil, "tls", "ca", "create", "-dir", dir); code != 1 || !strings.Contains(errOut, "exists") {
		t.Fatalf("second ca create: %d %s", code, errOut)
	}
	for _, id := range []string{"s1", "s2", "s3"} {
		if _, errOut, code := herd(nil, "tls", "cert", "create", "-server", "-id", id, "-dir", dir); code != 0 {
			t.Fatalf("cert create %s: %d %s", id, code, errOut)
		}
	}
	if _, _, code := herd(nil, "tls", "cert", "create", "-server", "-agent", "-id", "x", "-dir", dir); code != 2 {
		t.Fatalf("two roles: exit %d", code)
	}
	if _, _, code := herd(nil, "tls", "cert", "create", "-agent", "-id", "bad/id", "-dir", dir); code != 2 {
		t.Fatalf("bad id: exit %d", code)
	}
	for _, f := range []string{"ca.pem", "ca-key.pem", "s1.pem", "s1-key.pem"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	c := test.NewCluster(t, 3, func(cfg *config.Server) {
		cfg.TLSCAFile = filepath.Join(dir, "ca.pem")
		cfg.TLSCertFile = filepath.Join(dir, cfg.ID+".pem")
		cfg.TLSKeyFile = filepath.Join(dir, cfg.ID+"-key.pem")
		cfg.ACL = true
	})
	addr := c.Replicas[c.Follower()].Cfg.HTTPAddr
	vars := map[string]string{"HERD_ADDR": addr, "HERD_CACERT": filepath.Join(dir, "ca.pem")}

	if _, errOut, code := herd(map[string]string{"HERD_ADDR": addr}, "node", "list"); code != 1 || !strings.Contains(errOut, "speaks HTTPS") {
		t.Fatalf("plain HTTP: %d %s", code, errOut)
	}
	if _, errOut, code := herd(vars, "task", "submit", "--", "true"); code != 1 || !strings.Contains(errOut, "needs a token") || !strings.Contains(errOut, "herd: next: give an ACL token with -token or HERD_TOKEN") {
		t.Fatalf("submit without a token: %d %s", code, errOut)
	}
	out, errOut, code := herd(vars, "acl", "bootstrap", "-json")
	var boot struct {
		AccessorID string `json:"accessor_id"`
		SecretID   string `json:"secret_id"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &boot) != nil || boot.SecretID == "" || boot.AccessorID == "" {
		t.Fatalf("bootstrap: %d %q %s", code, out, errOut)
	}
	if _, errOut, code := herd(vars, "acl", "bootstrap"); code != 1 || !strings.Contains(errOut, "bootstrapped already") {
		t.Fatalf("second bootstrap: %d %s", code, errOut)
	}
	vars["HERD_TOKEN"] = boot.SecretID
	out, errOut, code = herd(vars, "acl", "token", "create", "-json", "-agent", "edge-1")
	var tok api.ACLToken
	if code != 0 || json.Unmarshal([]byte(out), &tok) != nil || tok.NodeID != "edge-1" || tok.SecretID == "" {
		t.Fatalf("agent token: %d %q %s", code, out, errOut)
	}
	if _, errOut, code := herd(vars, "task", "submit", "--", "true"); code != 0 {
		t.Fatalf("submit with the management token: %d %s", code, errOut)
	}
	agentVars := map[string]string{"HERD_ADDR": addr, "HERD_CACERT": vars["HERD_CACERT"], "HERD_TOKEN": tok.SecretID}
	if _, errOut, code := herd(agentVars, "task", "submit", "--", "true"); code != 1 || !strings.Contains(errOut, "acts for node edge-1 only") || !strings.Contains(errOut, "herd: next: the token's policy does not allow this") {
		t.Fatalf("submit with a node token: %d %s", code, errOut)
	}
	if out, errOut, code := herd(vars, "acl", "token", "list"); code != 0 || !strings.Contains(out, tok.AccessorID) || strings.Contains(out, tok.SecretID) {
		t.Fatalf("token list: %d %s %s", code, out, errOut)
	}
	if out, errOut, code := herd(vars, "operator", "audit"); code != 0 || !strings.Contains(out, "acl bootstrap") || !strings.Contains(out, "acl token create") {
		t.Fatalf("audit: %d %s %s", code, out, errOut)
	}
	if _, errOut, code := herd(vars, "acl", "token", "delete", tok.AccessorID); code != 0 {
		t.Fatalf("token delete: %d %s", code, errOut)
	}
	// The follower refuses the token once it applies the deletion, which
	// the leader had applied before it answered.
	c.WaitApplied(c.Server(c.WaitForLeader()).FSM().Index())
	if _, errOut, code := herd(agentVars, "node", "status", "edge-1"); code != 1 || !strings.Contains(errOut, "token not found") {
		t.Fatalf("deleted token: %d %s", code, errOut)
	}
}

// The gossip key rotation through the CLI: keygen, install, use, remove,
// list; a malformed key is a usage error.
func TestCLIGossipKeyring(t *testing.T) {
	herd := func(vars map[string]string, args ...string) (string, string, int) {
		e, out, errb := testEnv(vars)
		code := run(e, args)
		return out.String(), errb.String(), code
	}
	old, _, code := herd(nil, "operator", "gossip", "keygen")
	old = strings.TrimSpace(old)
	if code != 0 || len(old) != 44 {
		t.Fatalf("keygen: %d %q", code, old)
	}
	c := test.NewClusterWith(t, 3, test.Setup{Gossip: true, Config: []test.ClusterOption{func(cfg *config.Server) { cfg.GossipKey = old }}})
	vars := map[string]string{"HERD_ADDR": c.Replicas[c.Follower()].Cfg.HTTPAddr}
	neu, _, _ := herd(nil, "operator", "gossip", "keygen")
	neu = strings.TrimSpace(neu)
	if _, errOut, code := herd(vars, "operator", "gossip", "keyring", "install", "bm90LWEta2V5"); code != 2 || !strings.Contains(errOut, "must be 16, 24 or 32") {
		t.Fatalf("bad key: %d %s", code, errOut)
	}
	for _, step := range [][]string{{"install", neu}, {"use", neu}, {"remove", old}} {
		if _, errOut, code := herd(vars, "operator", "gossip", "keyring", step[0], step[1]); code != 0 {
			t.Fatalf("%s: %d %s", step[0], code, errOut)
		}
	}
	out, errOut, code := herd(vars, "operator", "gossip", "keyring", "list")
	if code != 0 || !strings.Contains(out, neu) || strings.Contains(out, old) || !strings.Contains(out, "yes") {
		t.Fatalf("list: %d %s %s", code, out, errOut)
	}
}
