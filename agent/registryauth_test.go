package agent

import (
	"context"
	"encoding/base64"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// A registry on loopback that answers only a user with the right password.
func privateRegistry(t *testing.T, user, password string) string {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="herd-test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func writeAuthFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A private registry's image is pulled with the credentials of the auth
// file, in either of its forms, and refused without them or with wrong
// ones; a file rewritten on disk is used from the next pull on.
func TestPullFromAPrivateRegistry(t *testing.T) {
	host := privateRegistry(t, "site", "s3cret")
	ref := host + "/tools/hello:1"
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img := imageOf(t, layerOf(t, entry{Name: "hello", Body: "hi"}))
	if err := remote.Write(r, img, remote.WithAuth(&authn.Basic{Username: "site", Password: "s3cret"})); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	anon, err := newImageCache(t.TempDir(), 1<<30, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anon.acquire(ctx, ref); err == nil || !strings.Contains(err.Error(), "the registry refused") {
		t.Fatalf("an anonymous pull from the private registry: %v", err)
	}

	wrong := `{"auths": {"` + host + `": {"username": "site", "password": "guess"}}}`
	authFile := writeAuthFile(t, wrong)
	c, err := newImageCache(t.TempDir(), 1<<30, nil, authFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.acquire(ctx, ref); err == nil || !strings.Contains(err.Error(), "the registry refused") {
		t.Fatalf("a pull with a wrong password: %v", err)
	}
	right := `{"auths": {"http://` + host + `/v2/": {"auth": "` + base64.StdEncoding.EncodeToString([]byte("site:s3cret")) + `"}}}`
	if err := os.WriteFile(authFile, []byte(right), 0o600); err != nil {
		t.Fatal(err)
	}
	pulled, err := c.acquire(ctx, ref)
	if err != nil {
		t.Fatalf("a pull with the rotated credentials: %v", err)
	}
	defer c.release(pulled.Digest)
	if b, err := os.ReadFile(filepath.Join(pulled.Root, "hello")); err != nil || string(b) != "hi" {
		t.Fatalf("the pulled root: %q, %v", b, err)
	}
}

// A credentials file that cannot be read or used stops the agent at
// start, naming the file.
func TestBadRegistryAuthFileIsRefused(t *testing.T) {
	for name, body := range map[string]string{
		"not json":    `{"auths": `,
		"no secret":   `{"auths": {"registry.example": {}}}`,
		"bad base64":  `{"auths": {"registry.example": {"auth": "%%%"}}}`,
		"no password": `{"auths": {"registry.example": {"auth": "` + base64.StdEncoding.EncodeToString([]byte("user-only")) + `"}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := writeAuthFile(t, body)
			if _, err := newImageCache(t.TempDir(), 1<<30, nil, path); err == nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("%s: %v, want an error naming the file", name, err)
			}
		})
	}
	if _, err := newImageCache(t.TempDir(), 1<<30, nil, filepath.Join(t.TempDir(), "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Fatalf("a missing file: %v", err)
	}
}
