package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"herd/api"
	"herd/test"
)

// lockedBuffer is a buffer a command writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// herd dev runs a cluster whose agents pretend to be different machines:
// the cluster judges each by the profile it reports, and the banner says
// where the dashboard is and what to try.
func TestDevRunsAFleetOfPretendMachines(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	out := &lockedBuffer{}
	stop := make(chan os.Signal, 1)
	e := &env{stdin: strings.NewReader(""), stdout: out, stderr: &lockedBuffer{}, getenv: func(string) (string, bool) { return "", false },
		signals: func() (<-chan os.Signal, func()) { return stop, func() {} }}
	done := make(chan int, 1)
	go func() { done <- run(e, []string{"dev", "-agents", "3", "-data-dir", t.TempDir()}) }()
	defer func() {
		stop <- os.Interrupt
		if code := <-done; code != 0 {
			t.Errorf("herd dev exited %d", code)
		}
	}()
	if !test.Eventually(60*time.Second, func() bool { return strings.Contains(out.String(), "Press Ctrl-C") }) {
		t.Fatalf("no banner:\n%s", out.String())
	}
	banner := out.String()
	addr := regexp.MustCompile(`Dashboard: (http://\S+)/ui/`).FindStringSubmatch(banner)
	if addr == nil || !strings.Contains(banner, "3 agents") || !strings.Contains(banner, "task run") {
		t.Fatalf("the banner must give the dashboard, the agents and a task to try:\n%s", banner)
	}
	cl, err := api.NewClient(addr[1])
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"mini-pc-1": 620, "atom-2": 110, "raspberry-pi-3": 85}
	var nodes []api.Node
	if !test.Eventually(60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		nodes, _, err = cl.ListNodes(ctx, api.ReadOptions{})
		if err != nil || len(nodes) != 3 {
			return false
		}
		for _, n := range nodes {
			if n.Profile == nil || n.Profile.CPUScore != want[n.ID] || n.Tier.Tier == "" {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the nodes must report their pretend profiles and get tiers: %+v, %v", nodes, err)
	}
	tiers := map[string]string{}
	for _, n := range nodes {
		tiers[n.ID] = n.Tier.Tier
	}
	if tiers["mini-pc-1"] == tiers["raspberry-pi-3"] {
		t.Fatalf("a mini PC and a Raspberry Pi must not be judged alike: tiers %v", tiers)
	}
}
