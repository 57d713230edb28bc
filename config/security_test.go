package config

import (
	"strings"
	"testing"
)

// Off loopback a replica needs TLS and ACLs, or -insecure; ACLs need TLS;
// the TLS files go together; a secured replica gossiping off loopback
// needs a key.
func TestSecureByDefaultOffLoopback(t *testing.T) {
	tls := func(c *Server) { c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = "ca.pem", "s1.pem", "s1-key.pem" }
	for name, tc := range map[string]struct {
		edit func(*Server)
		want string // "" for valid
	}{
		"loopback, open":            {func(*Server) {}, ""},
		"localhost, open":           {func(c *Server) { c.HTTPAddr, c.RaftAddr = "localhost:4646", "localhost:4647" }, ""},
		"all interfaces, open":      {func(c *Server) { c.HTTPAddr, c.HTTPAdvertise = ":4646", "10.0.0.1:4646" }, "http_addr :4646 is reachable from other machines"},
		"LAN raft, open":            {func(c *Server) { c.RaftAddr = "10.0.0.1:4647" }, "-insecure"},
		"LAN gossip, open":          {func(c *Server) { c.GossipAddr = "10.0.0.1:4648" }, "gossip_addr"},
		"LAN, insecure":             {func(c *Server) { c.RaftAddr, c.Insecure = "10.0.0.1:4647", true }, ""},
		"LAN, TLS without ACLs":     {func(c *Server) { c.RaftAddr = "10.0.0.1:4647"; tls(c) }, "TLS and ACLs are not both on"},
		"LAN, TLS and ACLs":         {func(c *Server) { c.RaftAddr = "10.0.0.1:4647"; tls(c); c.ACL = true }, ""},
		"ACLs without TLS":          {func(c *Server) { c.ACL = true }, "acl needs TLS"},
		"half the TLS files":        {func(c *Server) { c.TLSCAFile = "ca.pem" }, "together"},
		"secured LAN gossip no key": {func(c *Server) { tls(c); c.ACL = true; c.GossipAddr = "10.0.0.1:4648" }, "needs gossip_key"},
	} {
		c := valid()
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
