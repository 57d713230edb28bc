package agent

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// gatedRegistry is a registry on loopback whose blob downloads wait until
// open is closed, counting the manifest requests it answers.
func gatedRegistry(t *testing.T, open <-chan struct{}, manifests *atomic.Int64) string {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			select {
			case <-open:
			case <-r.Context().Done():
				return
			}
		}
		if strings.Contains(r.URL.Path, "/manifests/") {
			manifests.Add(1)
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// A pull that waits on its registry holds back neither an image already
// cached (its acquire, its release, the cache's status) nor anything but
// the acquires of its own reference, which share it: the registry is
// asked for the manifest once.
func TestASlowPullHoldsBackOnlyItsOwnReference(t *testing.T) {
	open := make(chan struct{})
	var manifests atomic.Int64
	host := gatedRegistry(t, open, &manifests)
	ref := host + "/tools/slow:1"
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, imageOf(t, layerOf(t, entry{Name: "slow", Body: "eventually"})), remote.WithContext(context.Background())); err != nil {
		t.Fatal(err)
	}
	manifests.Store(0)
	cached := layoutWith(t, map[string]v1.Image{"v1": imageOf(t, layerOf(t, entry{Name: "fast", Body: "now"}))})
	c, err := newImageCache(t.TempDir(), 1<<30, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := c.acquire(ctx, "oci-layout:"+cached+":v1")
	if err != nil {
		t.Fatal(err)
	}
	c.release(first.Digest)

	const waiters = 3
	results := make(chan error, waiters)
	for range waiters {
		go func() {
			img, err := c.acquire(ctx, ref)
			if err == nil {
				if b, rerr := os.ReadFile(filepath.Join(img.Root, "slow")); rerr != nil || string(b) != "eventually" {
					err = fmt.Errorf("the slow image's root: %q, %v", b, rerr)
				}
				c.release(img.Digest)
			}
			results <- err
		}()
	}
	// Every waiter is in: one pulls (its blobs wait on the gate), the
	// others wait for that pull.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mu.Lock()
		_, pulling := c.pulling[ref]
		c.mu.Unlock()
		if pulling && manifests.Load() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow pull never reached its registry")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Bounded, so that a cache that serialised its pulls fails here
	// instead of hanging on the gate.
	meanwhile := make(chan error, 1)
	go func() {
		hit, err := c.acquire(ctx, "oci-layout:"+cached+":v1")
		if err == nil && !hit.Hit {
			err = fmt.Errorf("not a hit: %+v", hit)
		}
		if err == nil {
			c.release(hit.Digest)
			if _, _, pulls, hits, _, _ := c.status(); pulls != 2 || hits != 1 {
				err = fmt.Errorf("status: %d pulls, %d hits; want 2 and 1", pulls, hits)
			}
		}
		meanwhile <- err
	}()
	select {
	case err := <-meanwhile:
		if err != nil {
			t.Fatalf("the cached image while another pulls: %v", err)
		}
	case <-time.After(30 * time.Second):
		close(open)
		t.Fatal("the cached image waited for another image's pull")
	}
	close(open)
	for range waiters {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if n := manifests.Load(); n != 1 {
		t.Fatalf("the registry was asked for the manifest %d times, want once", n)
	}
}

// Two references to one image pulled at once both get it: they share its
// layer's unpack, and whichever assembles the root second uses the first's.
func TestTwoReferencesToOneImagePulledAtOnce(t *testing.T) {
	open := make(chan struct{})
	var manifests atomic.Int64
	host := gatedRegistry(t, open, &manifests)
	img := imageOf(t, layerOf(t, entry{Name: "same", Body: "one image"}))
	refs := []string{host + "/tools/same:a", host + "/tools/same:b"}
	for _, ref := range refs {
		r, err := name.ParseReference(ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(r, img); err != nil {
			t.Fatal(err)
		}
	}
	c, err := newImageCache(t.TempDir(), 1<<30, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan error, len(refs))
	digests := make(chan string, len(refs))
	for _, ref := range refs {
		go func() {
			got, err := c.acquire(context.Background(), ref)
			if err == nil {
				digests <- got.Digest
				if b, rerr := os.ReadFile(filepath.Join(got.Root, "same")); rerr != nil || string(b) != "one image" {
					err = fmt.Errorf("%s: root %q, %v", ref, b, rerr)
				}
				c.release(got.Digest)
			}
			results <- err
		}()
	}
	close(open)
	for range refs {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if a, b := <-digests, <-digests; a != b {
		t.Fatalf("one image, two digests: %s and %s", a, b)
	}
	if used, _, _, _, _, images := c.status(); len(images) != 1 || used == 0 {
		t.Fatalf("the cache holds %d images (%d bytes), want the one", len(images), used)
	}
}
