package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func valid() Server {
	c := DefaultServer()
	c.ID = "s1"
	c.DataDir = "/tmp/x"
	return c
}

func TestDefaultsAreValid(t *testing.T) {
	c := valid()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.HTTPAdvertise != c.HTTPAddr || c.RaftAdvertise != c.RaftAddr {
		t.Fatalf("advertise addresses default to the listen addresses: %+v", c)
	}
}

func TestParseErrorsAreClear(t *testing.T) {
	for src, want := range map[string]string{
		`id = `:                      "parse config",
		`colour = "red"`:             `Unsupported argument; An argument named "colour"`,
		`bootstrap_expect = "three"`: "server.hcl:1,21-26: Unsuitable value type",
		"raft {\n heartbeat_timeout = \"soon\"\n}": "raft.heartbeat_timeout",
		"raft {\n trailing_logs = -1\n}":           "trailing_logs must not be negative",
	} {
		c := valid()
		err := ParseServer(&c, "server.hcl", []byte(src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: want error containing %q, got %v", src, want, err)
		}
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := valid()
	c.ID = ""
	c.HTTPAddr = "0.0.0.0:4646"
	c.Bootstrap, c.BootstrapExpect = true, 3
	c.Raft.LeaderLeaseTimeout = 10 * time.Second
	c.LogLevel = "loud"
	err := c.Validate()
	for _, want := range []string{"id \"\"", "http_advertise \"0.0.0.0:4646\" is not an address others can reach", "mutually exclusive", "bootstrap_expect needs join", "leader_lease_timeout", "log_level"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
}

func TestEnvironment(t *testing.T) {
	c := valid()
	env := map[string]string{"HERD_JOIN": "a:1, b:2,,", "HERD_BOOTSTRAP_EXPECT": "3", "HERD_DATA_DIR": "/d"}
	if err := ApplyServerEnv(&c, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if len(c.Join) != 2 || c.Join[1] != "b:2" || c.BootstrapExpect != 3 || c.DataDir != "/d" {
		t.Fatalf("environment not applied: %+v", c)
	}
	env = map[string]string{"HERD_BOOTSTRAP": "maybe"}
	if err := ApplyServerEnv(&c, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err == nil {
		t.Fatal("a bad boolean must be an error")
	}
}

// loadHCL loads body as a server config file over cfg.
func loadHCL(t *testing.T, cfg *Server, body string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "server.hcl")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := LoadServerFile(cfg, path); err != nil {
		t.Fatal(err)
	}
}

func TestEnableDebugFromFile(t *testing.T) {
	cfg := DefaultServer()
	if cfg.EnableDebug {
		t.Fatal("debug profiles are on by default")
	}
	loadHCL(t, &cfg, "enable_debug = true\n")
	if !cfg.EnableDebug {
		t.Fatal("enable_debug = true did not enable debug profiles")
	}
}

func TestGCHeadroomSettings(t *testing.T) {
	cfg := valid()
	if cfg.GCHeadroomMiB != DefaultGCHeadroomMiB {
		t.Fatalf("default gc_headroom_mib %d, want %d", cfg.GCHeadroomMiB, DefaultGCHeadroomMiB)
	}
	loadHCL(t, &cfg, "gc_headroom_mib = 0\n")
	if cfg.GCHeadroomMiB != 0 || cfg.Validate() != nil {
		t.Fatalf("gc_headroom_mib = 0 gave %d (%v)", cfg.GCHeadroomMiB, cfg.Validate())
	}
	if err := ApplyServerEnv(&cfg, func(k string) (string, bool) {
		return map[string]string{"HERD_GC_HEADROOM_MIB": "64"}[k], k == "HERD_GC_HEADROOM_MIB"
	}); err != nil || cfg.GCHeadroomMiB != 64 {
		t.Fatalf("HERD_GC_HEADROOM_MIB=64 gave %d (%v)", cfg.GCHeadroomMiB, err)
	}
	cfg.GCHeadroomMiB = -1
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "gc_headroom_mib") {
		t.Fatalf("gc_headroom_mib -1 accepted (%v)", err)
	}
}

func TestMemoryLimitSettings(t *testing.T) {
	cfg := valid()
	loadHCL(t, &cfg, "memory_limit_mib = 128\n")
	if cfg.MemoryLimitMiB != 128 || cfg.Validate() != nil {
		t.Fatalf("memory_limit_mib = 128 gave %d (%v)", cfg.MemoryLimitMiB, cfg.Validate())
	}
	if err := ApplyServerEnv(&cfg, func(k string) (string, bool) {
		return map[string]string{"HERD_MEMORY_LIMIT_MIB": "256"}[k], k == "HERD_MEMORY_LIMIT_MIB"
	}); err != nil || cfg.MemoryLimitMiB != 256 {
		t.Fatalf("HERD_MEMORY_LIMIT_MIB=256 gave %d (%v)", cfg.MemoryLimitMiB, err)
	}
	for _, bad := range []int{-1, 8} {
		cfg.MemoryLimitMiB = bad
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "memory_limit_mib") {
			t.Fatalf("memory_limit_mib %d accepted (%v)", bad, err)
		}
	}
}
