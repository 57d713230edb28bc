package agent

import (
	"path/filepath"
	"testing"
	"time"
)

func TestPathCacheKeepsLookupsForItsTTL(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	c := pathCache{now: func() time.Time { return now }}
	first := c.command("sh", "-c", "true")
	if first.Err != nil || !filepath.IsAbs(first.Path) {
		t.Fatalf("sh should be found on PATH: %q, %v", first.Path, first.Err)
	}
	// Within the TTL the lookup is not repeated: an empty PATH is not
	// even read.
	t.Setenv("PATH", "")
	cached := c.command("sh", "-c", "true")
	if cached.Err != nil || cached.Path != first.Path {
		t.Fatalf("cached lookup: %q, %v; want %q", cached.Path, cached.Err, first.Path)
	}
	if got := cached.Args; len(got) != 3 || got[0] != "sh" || got[2] != "true" {
		t.Fatalf("the task must see the name it gave as argv[0]: %q", got)
	}
	// Once it expires, the lookup runs again and sees the empty PATH.
	now = now.Add(pathCacheTTL)
	if again := c.command("sh"); again.Err == nil {
		t.Fatalf("an expired entry must be looked up again: found %q with an empty PATH", again.Path)
	}
	// Failed lookups are not kept; a name with a slash is not looked up.
	t.Setenv("PATH", filepath.Dir(first.Path))
	if found := c.command("sh"); found.Err != nil {
		t.Fatalf("after a failed lookup the next one must search again: %v", found.Err)
	}
	if direct := c.command("./tool", "x"); direct.Path != "./tool" || direct.Args[0] != "./tool" {
		t.Fatalf("a path is used as given: %q %q", direct.Path, direct.Args)
	}
}
