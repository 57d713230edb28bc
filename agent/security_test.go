package agent

import (
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
