package agent

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

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

// The data port judges each request by its certificate: logs and the
// image cache go to servers and to the node's own certificate, never to
// another node's agent; datasets to every agent (stages fetch their
// inputs there); metrics also to client certificates (a scraper). A
// refusal is a 403 with a JSON error that says who may.
func TestDataPortServesEachRouteToItsAudience(t *testing.T) {
	dir := t.TempDir()
	if err := pki.CreateCA(dir, "", 0); err != nil {
		t.Fatal(err)
	}
	files := map[string]pki.Files{}
	for _, id := range []pki.Identity{{Role: pki.RoleAgent, ID: "n1"}, {Role: pki.RoleAgent, ID: "n2"}, {Role: pki.RoleServer, ID: "s1"}, {Role: pki.RoleClient, ID: "prometheus"}} {
		if _, err := pki.CreateCert(dir, pki.CertRequest{Identity: id}); err != nil {
			t.Fatal(err)
		}
		files[id.String()] = pki.Files{CA: dir + "/ca.pem", Cert: pki.CertFile(dir, id.ID), Key: pki.KeyFile(dir, id.ID)}
	}
	a, err := New(Config{ID: "n1", Servers: []string{"127.0.0.1:4646"}, DataDir: t.TempDir(), Limits: "none", NoBench: true, TLS: files["agent/n1"]})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := a.serveDatasets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	get := func(who, path string) (int, string) {
		t.Helper()
		m, err := pki.Load(files[who])
		if err != nil {
			t.Fatal(err)
		}
		tr := &http.Transport{DialTLSContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return pki.Dial(ctx, (&net.Dialer{}).DialContext, addr, m.ClientConfig(pki.RoleAgent))
		}}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + addr + path)
		if err != nil {
			t.Fatalf("%s GET %s: %v", who, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	allowed := func(code int) bool { return code != http.StatusForbidden && code < 500 }
	for _, tc := range []struct {
		who, path string
		ok        bool
	}{
		{"server/s1", "/v1/logs/att-1", true},
		{"agent/n1", "/v1/logs/att-1", true},
		{"agent/n2", "/v1/logs/att-1", false},
		{"client/prometheus", "/v1/logs/att-1", false},
		{"server/s1", "/v1/images", true},
		{"agent/n1", "/v1/images", true},
		{"agent/n2", "/v1/images", false},
		{"client/prometheus", "/v1/images", false},
		{"agent/n2", "/v1/datasets/photos", true},
		{"server/s1", "/v1/datasets/photos", true},
		{"client/prometheus", "/v1/datasets/photos", false},
		{"client/prometheus", "/metrics", true},
		{"server/s1", "/metrics", true},
		{"agent/n2", "/metrics", false},
	} {
		code, body := get(tc.who, tc.path)
		switch {
		case tc.ok && !allowed(code):
			t.Errorf("%s GET %s: %d %s, want it served", tc.who, tc.path, code, body)
		case !tc.ok && code != http.StatusForbidden:
			t.Errorf("%s GET %s: %d %s, want 403", tc.who, tc.path, code, body)
		case !tc.ok:
			var e struct{ Error string }
			if json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, tc.who+" may not GET "+tc.path) {
				t.Errorf("%s GET %s: the refusal says %q", tc.who, tc.path, body)
			}
		}
	}
}
