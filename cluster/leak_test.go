package cluster_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"herd/test/localcluster"
)

// A replica that started, led and shut down leaves no goroutine behind:
// operators restart replicas in place, and tests start hundreds.
func TestShutdownLeaksNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfgs, err := localcluster.Configs(t.TempDir(), "s", 1, true)
	if err != nil {
		t.Fatal(err)
	}
	cfgs[0].LogLevel = "off"
	if err := cfgs[0].Validate(); err != nil {
		t.Fatal(err)
	}
	c, err := localcluster.Start(cfgs, localcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Leader(ctx); err != nil {
		c.Shutdown()
		t.Fatalf("single replica did not become leader: %v", err)
	}
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
}
