package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// issue makes a CA in a fresh directory and certificates for ids.
func issue(t *testing.T, ids ...Identity) string {
	t.Helper()
	dir := t.TempDir()
	if err := CreateCA(dir, "", 0); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := CreateCert(dir, CertRequest{Identity: id, Hosts: []string{"10.0.0.5", "box.example"}}); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func material(t *testing.T, dir, id string) *Material {
	t.Helper()
	m, err := Load(Files{CA: filepath.Join(dir, CAFile), Cert: CertFile(dir, id), Key: KeyFile(dir, id)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCertificatesCarryRoleAndID(t *testing.T) {
	srv, ag, cl := Identity{RoleServer, "s1"}, Identity{RoleAgent, "node-7"}, Identity{RoleClient, "alice"}
	dir := issue(t, srv, ag, cl)
	for _, want := range []Identity{srv, ag, cl} {
		m := material(t, dir, want.ID)
		if got := m.Identity(); got != want {
			t.Errorf("identity of %s = %s", want.ID, got)
		}
		raw, _ := os.ReadFile(CertFile(dir, want.ID))
		b, _ := pem.Decode(raw)
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if c.PublicKeyAlgorithm != x509.ECDSA {
			t.Errorf("%s: key %v, want ECDSA", want, c.PublicKeyAlgorithm)
		}
		server := false
		for _, u := range c.ExtKeyUsage {
			server = server || u == x509.ExtKeyUsageServerAuth
		}
		if server != (want.Role != RoleClient) {
			t.Errorf("%s: server auth %v", want, server)
		}
		if want.Role == RoleServer && len(c.IPAddresses) != 3 { // 10.0.0.5, 127.0.0.1, ::1
			t.Errorf("server IP SANs = %v", c.IPAddresses)
		}
		if fi, _ := os.Stat(KeyFile(dir, want.ID)); fi.Mode().Perm() != 0o600 {
			t.Errorf("key mode %v", fi.Mode().Perm())
		}
	}
	if err := CreateCA(dir, "", 0); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("second CA in the same directory: %v", err)
	}
	if _, err := CreateCert(t.TempDir(), CertRequest{Identity: srv}); err == nil || !strings.Contains(err.Error(), "herd tls ca create") {
		t.Errorf("cert without a CA: %v", err)
	}
	if _, err := CreateCert(dir, CertRequest{Identity: Identity{"root", "x"}}); err == nil {
		t.Error("unknown role accepted")
	}
}

func TestReloadKeepsIdentityAndRefusesAnother(t *testing.T) {
	dir := issue(t, Identity{RoleServer, "s1"}, Identity{RoleServer, "s2"})
	m := material(t, dir, "s1")
	before := m.cur.Load().cert.Leaf.SerialNumber
	if _, err := CreateCert(dir, CertRequest{Identity: Identity{RoleServer, "s1"}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Reload(); err != nil {
		t.Fatal(err)
	}
	if m.cur.Load().cert.Leaf.SerialNumber.Cmp(before) == 0 {
		t.Error("reload kept the old certificate")
	}
	// s2's pair written over s1's files: refused, s1 kept.
	for _, f := range []string{".pem", "-key.pem"} {
		b, _ := os.ReadFile(filepath.Join(dir, "s2"+f))
		os.WriteFile(filepath.Join(dir, "s1"+f), b, 0o600)
	}
	if err := m.Reload(); err == nil || !strings.Contains(err.Error(), "cannot change") {
		t.Errorf("reload to another identity: %v", err)
	}
	if m.Identity().ID != "s1" {
		t.Error("identity changed")
	}
	// A broken file leaves the material in use.
	os.WriteFile(CertFile(dir, "s1"), []byte("junk"), 0o644)
	if err := m.Reload(); err == nil {
		t.Error("junk certificate accepted")
	}
	if m.Identity().ID != "s1" {
		t.Error("identity lost on a failed reload")
	}
}

// handshake connects a client holding client to a listener holding
// server that allows only servers.
func handshake(t *testing.T, server, client *Material, want Role) (serverErr, clientErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tl := Listener(ln, server.ServerConfig(ClientCertRequired, RequireRole(RoleServer)))
	done := make(chan error, 1)
	go func() {
		c, err := tl.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_, err = c.Read(make([]byte, 1))
		done <- err
	}()
	c, cerr := Dial(context.Background(), (&net.Dialer{}).DialContext, ln.Addr().String(), client.ClientConfig(want))
	if cerr == nil {
		_, cerr = c.Write([]byte{1})
		c.Close()
	}
	return <-done, cerr
}

func TestHandshakeChecksRoles(t *testing.T) {
	dir := issue(t, Identity{RoleServer, "s1"}, Identity{RoleServer, "s2"}, Identity{RoleAgent, "s3"})
	s1, s2, ag := material(t, dir, "s1"), material(t, dir, "s2"), material(t, dir, "s3")
	if serr, cerr := handshake(t, s1, s2, RoleServer); serr != nil || cerr != nil {
		t.Fatalf("server to server: %v / %v", serr, cerr)
	}
	if serr, _ := handshake(t, s1, ag, RoleServer); serr == nil || !strings.Contains(serr.Error(), "only a server") {
		t.Errorf("agent certificate accepted as a server: %v", serr)
	}
	// A client that wants an agent refuses a server.
	if _, cerr := handshake(t, s1, s2, RoleAgent); cerr == nil || !strings.Contains(cerr.Error(), "not a agent") {
		t.Errorf("server accepted as an agent: %v", cerr)
	}
	// A certificate from another CA.
	other := issue(t, Identity{RoleServer, "s9"})
	if serr, cerr := handshake(t, s1, material(t, other, "s9"), RoleServer); serr == nil || cerr == nil {
		t.Errorf("foreign CA accepted: %v / %v", serr, cerr)
	}
}

func TestIdentityParsing(t *testing.T) {
	for _, s := range []string{"server/s1", "agent/node-7", "client/a.b_c"} {
		id, err := ParseIdentity(s)
		if err != nil || id.String() != s {
			t.Errorf("%q: %v %v", s, id, err)
		}
		back, err := ParseIdentityURI(id.URI())
		if err != nil || back != id {
			t.Errorf("%q through its URI: %v %v", s, back, err)
		}
	}
	for _, s := range []string{"", "server", "server/", "root/x", "agent/a/b", "agent/-x", "/x"} {
		if _, err := ParseIdentity(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
	for _, s := range []string{"https://server/s1", "herd://server/s1?x=1", "herd://u@server/s1", "herd:opaque", "herd://server"} {
		u, _ := url.Parse(s)
		if _, err := ParseIdentityURI(u); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

func FuzzParseIdentity(f *testing.F) {
	for _, s := range []string{"server/s1", "agent/n", "client/x", "herd://agent/n", "herd://server/s1/x", "a/b/c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if id, err := ParseIdentity(s); err == nil {
			if id.Validate() != nil || id.String() != s {
				t.Fatalf("%q parsed to %v", s, id)
			}
			if back, err := ParseIdentityURI(id.URI()); err != nil || back != id {
				t.Fatalf("%q: round trip %v %v", s, back, err)
			}
		}
		if u, err := url.Parse(s); err == nil {
			if id, err := ParseIdentityURI(u); err == nil && id.Validate() != nil {
				t.Fatalf("%q gave invalid %v", s, id)
			}
		}
	})
}

// ClientConfigFor admits exactly one holder: another holder of the same
// role is refused, as is a holder of another role.
func TestClientConfigForAdmitsOneHolder(t *testing.T) {
	want := Identity{Role: RoleAgent, ID: "n1"}
	peers := []Identity{want, {Role: RoleAgent, ID: "n2"}, {Role: RoleClient, ID: "alice"}}
	dir := issue(t, append([]Identity{{Role: RoleServer, ID: "s1"}}, peers...)...)
	server := material(t, dir, "s1")
	for i, peerID := range peers {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", material(t, dir, peerID.ID).ServerConfig(ClientCertRequired, nil))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			if c, err := ln.Accept(); err == nil {
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}
		}()
		c, err := Dial(context.Background(), (&net.Dialer{}).DialContext, ln.Addr().String(), server.ClientConfigFor(want))
		if c != nil {
			c.Close()
		}
		ln.Close()
		if ok := i == 0; (err == nil) != ok {
			t.Errorf("dialing %s for %s: %v", peerID, want, err)
		}
	}
}
