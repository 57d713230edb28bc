package main

import (
	"flag"
	"io"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"herd/config"
)

// examples/secure-server.hcl is the configuration-file form of the
// secured `herd server` of docs/security.md: the two give the same
// settings (the gossip key from the environment), and the result passes
// the server's own validation, security rules included.
func TestSecureServerExampleMatchesTheDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```sh\n(herd server -id s1 .*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/security.md has no herd server -id s1 block")
	}
	const key = "c2l4dGVlbiBieXRlcyBrZQ=="
	args := strings.Fields(strings.NewReplacer("\\\n", " ", `"$KEY"`, key).Replace(string(m[1])))[2:]
	fromFlags := config.ServerSettings.Defaults()
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	apply := config.ServerSettings.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("the docs' flags %q: %v", args, err)
	}
	if err := apply(&fromFlags); err != nil {
		t.Fatal(err)
	}

	src, err := os.ReadFile("../../examples/secure-server.hcl")
	if err != nil {
		t.Fatal(err)
	}
	fromFile := config.ServerSettings.Defaults()
	if err := config.ServerSettings.ParseHCL(&fromFile, "secure-server.hcl", src); err != nil {
		t.Fatal(err)
	}
	if fromFile.GossipKey != "" {
		t.Fatal("the example holds the gossip key: it must come from the environment")
	}
	env := map[string]string{"HERD_GOSSIP_KEY": key}
	if err := config.ServerSettings.ApplyEnv(&fromFile, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromFile, fromFlags) {
		for _, s := range config.ServerSettings.Settings {
			if a, b := s.Value(&fromFile), s.Value(&fromFlags); a != b {
				t.Errorf("%s: the example says %q, docs/security.md %q", s.Name, a, b)
			}
		}
		t.Fatal("the example and the docs configure different servers")
	}
	if err := fromFile.Validate(); err != nil {
		t.Fatalf("the example does not pass the server's validation: %v", err)
	}
	if fromFile.Open() {
		t.Fatal("the example's server is open: it must have TLS and ACLs")
	}
}
