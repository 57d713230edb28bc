package agent

import (
	"os"
	"strings"
	"testing"

	"herd/internal/pki"
)

// An agent talks to servers, or gossips, off loopback only with TLS or
// when told -insecure; its TLS files go together.
func TestAgentSecureByDefaultOffLoopback(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*Config)
		want string
	}{
		"loopback":             {func(*Config) {}, ""},
		"LAN server":           {func(c *Config) { c.Servers = []string{"10.0.0.1:4646"} }, "-insecure"},
		"LAN server URL":       {func(c *Config) { c.Servers = []string{"http://10.0.0.1:4646"} }, "server 10.0.0.1:4646 is off loopback"},
		"LAN gossip":           {func(c *Config) { c.GossipAddr = "10.0.0.7:4648" }, "gossip address"},
		"LAN server, insecure": {func(c *Config) { c.Servers, c.Insecure = []string{"10.0.0.1:4646"}, true }, ""},
		"LAN server, TLS":      {func(c *Config) { c.Servers, c.TLS = []string{"10.0.0.1:4646"}, pki.Files{CA: "a", Cert: "b", Key: "c"} }, ""},
		"half the TLS files":   {func(c *Config) { c.TLS = pki.Files{CA: "a"} }, "-tls-cert-file"},
	} {
		c := Config{ID: "n1", Servers: []string{"127.0.0.1:4646"}, DataDir: t.TempDir()}.WithDefaults()
		tc.edit(&c)
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

// An agent's certificate must be issued for its own node id.
func TestAgentRefusesAnotherNodesCertificate(t *testing.T) {
	dir := t.TempDir()
	if err := pki.CreateCA(dir, "", 0); err != nil {
		t.Fatal(err)
	}
	for _, id := range []pki.Identity{{Role: pki.RoleAgent, ID: "n2"}, {Role: pki.RoleServer, ID: "n1"}} {
		if _, err := pki.CreateCert(dir, pki.CertRequest{Identity: id}); err != nil {
			t.Fatal(err)
		}
		_, err := New(Config{ID: "n1", Servers: []string{"127.0.0.1:4646"}, DataDir: t.TempDir(), Limits: "none",
			TLS: pki.Files{CA: dir + "/ca.pem", Cert: pki.CertFile(dir, id.ID), Key: pki.KeyFile(dir, id.ID)}})
		if err == nil || !strings.Contains(err.Error(), "not agent/n1") {
			t.Errorf("%s's certificate: %v", id, err)
		}
	}
}

// SIGHUP's reload: a new certificate for the same node is taken, one for
// another node is refused and the one in use kept.
func TestAgentReloadsItsCertificate(t *testing.T) {
	dir := t.TempDir()
	if err := pki.CreateCA(dir, "", 0); err != nil {
		t.Fatal(err)
	}
	issue := func(id string) {
		t.Helper()
		if _, err := pki.CreateCert(dir, pki.CertRequest{Identity: pki.Identity{Role: pki.RoleAgent, ID: id}}); err != nil {
			t.Fatal(err)
		}
	}
	issue("n1")
	files := pki.Files{CA: dir + "/ca.pem", Cert: pki.CertFile(dir, "n1"), Key: pki.KeyFile(dir, "n1")}
	a, err := New(Config{ID: "n1", Servers: []string{"127.0.0.1:4646"}, DataDir: t.TempDir(), Limits: "none", TLS: files})
	if err != nil {
		t.Fatal(err)
	}
	before := a.tls.NotAfter()
	issue("n1")
	if err := a.ReloadTLS(); err != nil {
		t.Fatalf("reload of a new certificate for n1: %v", err)
	}
	issue("n2")
	for _, f := range []string{".pem", "-key.pem"} {
		b, err := os.ReadFile(dir + "/n2" + f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir+"/n1"+f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.ReloadTLS(); err == nil {
		t.Fatal("took another node's certificate")
	}
	if id := a.tls.Identity(); id.ID != "n1" || a.tls.NotAfter().Before(before) {
		t.Fatalf("identity after a refused reload: %v", id)
	}
}
