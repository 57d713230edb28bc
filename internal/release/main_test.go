package main

import (
	"strings"
	"testing"
)

func TestReleaseNamesAndStamps(t *testing.T) {
	var names []string
	for _, tg := range targets {
		names = append(names, tg.name())
	}
	if got := strings.Join(names, " "); got != "linux-amd64 linux-arm64 linux-armv7" {
		t.Fatalf("targets %s", got)
	}
	f := ldflags("0.1.0", "abc", "2026-12-07T00:00:00Z")
	for _, want := range []string{"-buildid=", "herd/internal/version.version=0.1.0", "herd/internal/version.commit=abc", "herd/internal/version.date=2026-12-07T00:00:00Z"} {
		if !strings.Contains(f, want) {
			t.Fatalf("ldflags %q lack %q", f, want)
		}
	}
	for v, ok := range map[string]bool{"0.1.0": true, "1.2.3-rc1": true, "0.1": false, "v0.1.0": false, "0.x.0": false, "": false} {
		if validVersion(v) != ok {
			t.Errorf("validVersion(%q) = %v", v, !ok)
		}
	}
}
