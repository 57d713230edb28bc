package main

import (
	"bufio"
	"os"
	"strings"
	"testing"

	"herd/config"
)

// The example deployment files stay valid: the server configuration
// parses and passes validation but for its files, and the agent's
// environment file and flags are what herd agent reads.
func TestDeployExamplesParse(t *testing.T) {
	srv := config.DefaultServer()
	if err := config.LoadServerFile(&srv, "../../deploy/server.hcl"); err != nil {
		t.Fatal(err)
	}
	if srv.ID != "s1" || !srv.ACL || srv.BootstrapExpect != 3 || len(srv.Join) != 3 || srv.TLSCAFile == "" || srv.Profiles.L1MinCores != 4 {
		t.Fatalf("deploy/server.hcl read as %+v", srv)
	}
	f, err := os.Open("../../deploy/agent.env")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("agent.env: %q is not NAME=VALUE", line)
		}
		env[k] = v
	}
	set := agentTable.Defaults()
	if err := agentTable.ApplyEnv(&set, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	e, _, _ := testEnv(nil)
	fs := newFlags(e, "agent", "", "")
	apply := agentTable.BindFlags(fs)
	if err := fs.Parse(strings.Fields(env["HERD_AGENT_FLAGS"])); err != nil || fs.NArg() != 0 {
		t.Fatalf("HERD_AGENT_FLAGS: %v, left %v", err, fs.Args())
	}
	if err := apply(&set); err != nil {
		t.Fatal(err)
	}
	if set.ID != "edge-1" || len(set.Servers) != 3 || set.Datasets["camera-7"] != "/srv/camera-7" || set.HealthCheck == "" || set.DataAddr == "" || set.TLSCertFile == "" {
		t.Fatalf("agent.env read as %+v", set)
	}
	for _, unit := range []string{"herd-server.service", "herd-agent.service"} {
		b, err := os.ReadFile("../../deploy/" + unit)
		if err != nil || !strings.Contains(string(b), "ExecStart=/usr/local/bin/herd ") || !strings.Contains(string(b), "[Install]") {
			t.Fatalf("deploy/%s: %v", unit, err)
		}
	}
}
