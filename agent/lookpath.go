package agent

import (
	"os/exec"
	"strings"
	"sync"
	"time"
)

// pathCache remembers where PATH lookups of task commands led, so that
// attempts of the same command do not search PATH each time. Entries are
// trusted for pathCacheTTL, so a program installed or moved later is
// found within that time; failed lookups are not kept.
type pathCache struct {
	mu      sync.Mutex
	entries map[string]pathEntry
	now     func() time.Time
}

type pathEntry struct {
	path string
	at   time.Time
}

const (
	pathCacheTTL = 10 * time.Second
	pathCacheMax = 256
)

// command is exec.Command with the lookup cached. The task still sees
// the name it gave as its argv[0].
func (c *pathCache) command(name string, args ...string) *exec.Cmd {
	if strings.ContainsRune(name, '/') {
		return exec.Command(name, args...)
	}
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries[name]
	c.mu.Unlock()
	if !ok || now.Sub(e.at) >= pathCacheTTL || now.Before(e.at) {
		cmd := exec.Command(name, args...) // looks it up, or records why not
		if cmd.Err != nil {
			return cmd
		}
		e = pathEntry{path: cmd.Path, at: now}
		c.mu.Lock()
		if c.entries == nil || len(c.entries) >= pathCacheMax {
			c.entries = map[string]pathEntry{}
		}
		c.entries[name] = e
		c.mu.Unlock()
		return cmd
	}
	return &exec.Cmd{Path: e.path, Args: append([]string{name}, args...)}
}
