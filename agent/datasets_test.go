package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"herd/api"
)

// An input is fetched from the agent holding it and checked: a good copy
// lands where the command finds it; a corrupted one, a missing one or an
// input held nowhere is an attempt failure with the reason, and nothing
// half-written is left for the command.
func TestInputsAreFetchedAndChecked(t *testing.T) {
	holder := agentForTest(t, "none", func() (limiter, error) { return noLimits{}, nil })
	holder.profile = newProfiler(holder)
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "pre.bin"), []byte("FRAME-1"), 0o600); err != nil {
		t.Fatal(err)
	}
	holder.profile.keepOutputs("j1.1.0", work, []string{"pre.bin"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := holder.serveDatasets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A server that lies about the checksum.
	liar := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(HeaderSHA256, strings.Repeat("0", 64))
		_, _ = w.Write([]byte("FRAME-1"))
	}))
	defer liar.Close()

	reader := agentForTest(t, "none", func() (limiter, error) { return noLimits{}, nil })
	reader.profile = newProfiler(reader)
	as := func(from string) api.Assignment {
		return api.Assignment{
			Attempt: api.Attempt{ID: "j1.2.0-1"},
			Spec:    api.TaskSpec{Inputs: []string{"j1.1.0:pre.bin"}, InputPaths: []string{"preprocess/pre.bin"}},
			Inputs:  []api.InputSource{{Dataset: "j1.1.0:pre.bin", NodeID: "holder", Address: from}},
		}
	}
	dir, err := reader.prepareInputs(ctx, as(addr))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "preprocess", "pre.bin")); err != nil || string(b) != "FRAME-1" {
		t.Fatalf("fetched %q (%v)", b, err)
	}
	os.RemoveAll(dir)
	var unavailable *inputUnavailableError
	if _, err := reader.prepareInputs(ctx, as(strings.TrimPrefix(liar.URL, "http://"))); err == nil || !strings.Contains(err.Error(), "checksum mismatch") || errors.As(err, &unavailable) {
		t.Fatalf("a corrupted copy (the task's attempt fails, counted): %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "preprocess", "pre.bin")); !os.IsNotExist(err) {
		t.Fatalf("a corrupted copy was left for the command: %v", err)
	}
	missing := as(addr)
	missing.Spec.Inputs[0], missing.Inputs[0].Dataset = "j1.1.0:gone.bin", "j1.1.0:gone.bin"
	if _, err := reader.prepareInputs(ctx, missing); err == nil || !strings.Contains(err.Error(), "404") || !errors.As(err, &unavailable) {
		t.Fatalf("an input the holder lacks (unavailable): %v", err)
	}
	nowhere := as(addr)
	nowhere.Inputs = nil
	if _, err := reader.prepareInputs(ctx, nowhere); err == nil || !strings.Contains(err.Error(), "held on no reachable node") || !errors.As(err, &unavailable) {
		t.Fatalf("an input held nowhere (unavailable): %v", err)
	}
	gone := as("127.0.0.1:1") // nothing listens: the holder is down
	if _, err := reader.prepareInputs(ctx, gone); err == nil || !errors.As(err, &unavailable) {
		t.Fatalf("an unreachable holder (unavailable): %v", err)
	}
}
