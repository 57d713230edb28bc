package agent

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"herd/internal/testimage"
)

// entry is one file, directory or link of a test layer.
type entry = testimage.File

func layerOf(t testing.TB, entries ...entry) v1.Layer {
	t.Helper()
	return testimage.Layer(t, entries...)
}

// layoutWith writes images into an OCI layout, tagged, and returns its
// directory.
func layoutWith(t testing.TB, images map[string]v1.Image) string {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	for tag, img := range images {
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func imageOf(t testing.TB, layers ...v1.Layer) v1.Image {
	t.Helper()
	return testimage.Image(t, nil, layers...)
}

// Layers apply in order: an upper layer's whiteout removes a lower file,
// an opaque whiteout empties a directory, files are hard links into the
// layer cache; a second acquire is a hit.
func TestImageRootAppliesLayersAndWhiteouts(t *testing.T) {
	lower := layerOf(t, entry{Name: "etc/", Type: tar.TypeDir}, entry{Name: "etc/gone", Body: "x"}, entry{Name: "etc/kept", Body: "lower"},
		entry{Name: "data/", Type: tar.TypeDir}, entry{Name: "data/old", Body: "old"}, entry{Name: "bin/", Type: tar.TypeDir}, entry{Name: "bin/tool", Body: "v1"})
	upper := layerOf(t, entry{Name: "etc/.wh.gone"}, entry{Name: "data/.wh..wh..opq"}, entry{Name: "data/new", Body: "new"},
		entry{Name: "bin/tool", Body: "v2"}, entry{Name: "bin/alias", Type: tar.TypeSymlink, Link: "tool"})
	dir := layoutWith(t, map[string]v1.Image{"v1": imageOf(t, lower, upper)})
	c, err := newImageCache(t.TempDir(), 1<<30, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	img, err := c.acquire(context.Background(), "oci-layout:"+dir+":v1")
	if err != nil {
		t.Fatal(err)
	}
	read := func(p string) string { b, _ := os.ReadFile(filepath.Join(img.Root, p)); return string(b) }
	if _, err := os.Stat(filepath.Join(img.Root, "etc/gone")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a whited-out file is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(img.Root, "data/old")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an opaque directory kept a lower file: %v", err)
	}
	if read("etc/kept") != "lower" || read("data/new") != "new" || read("bin/tool") != "v2" || read("bin/alias") != "v2" {
		t.Fatalf("root: kept %q new %q tool %q alias %q", read("etc/kept"), read("data/new"), read("bin/tool"), read("bin/alias"))
	}
	if img.Hit {
		t.Fatal("the first acquire cannot be a hit")
	}
	c.release(img.Digest)
	again, err := c.acquire(context.Background(), "oci-layout:"+dir+":v1")
	if err != nil || !again.Hit || again.Root != img.Root {
		t.Fatalf("the second acquire: %+v (%v)", again, err)
	}
	if _, _, pulls, hits, _, _ := c.status(); pulls != 1 || hits != 1 {
		t.Fatalf("pulls %d, hits %d", pulls, hits)
	}
}

// A layer cannot write outside its directory through a symbolic link.
func TestLayerCannotEscapeThroughASymlink(t *testing.T) {
	outside := t.TempDir()
	evil := layerOf(t, entry{Name: "escape", Type: tar.TypeSymlink, Link: outside}, entry{Name: "escape/pwned", Body: "x"})
	dir := layoutWith(t, map[string]v1.Image{"evil": imageOf(t, evil)})
	c, err := newImageCache(t.TempDir(), 1<<30, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.acquire(context.Background(), "oci-layout:"+dir+":evil")
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("an escaping layer was accepted: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "pwned")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the layer wrote outside the cache")
	}
}

// Over its cap the cache evicts the least recently used image not in
// use; when only images in use are left, the pull fails as cache full.
func TestImageCacheEvictsLeastRecentlyUsed(t *testing.T) {
	body := strings.Repeat("x", 300<<10)
	imgs := map[string]v1.Image{}
	for _, tag := range []string{"a", "b", "c"} {
		imgs[tag] = imageOf(t, layerOf(t, entry{Name: tag + ".bin", Body: body}))
	}
	dir := layoutWith(t, imgs)
	c, err := newImageCache(t.TempDir(), 700<<10, nil, "") // room for two
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	use := func(tag string) pulledImage {
		t.Helper()
		img, err := c.acquire(ctx, "oci-layout:"+dir+":"+tag)
		if err != nil {
			t.Fatalf("acquire %s: %v", tag, err)
		}
		return img
	}
	a := use("a")
	c.release(a.Digest)
	b := use("b")
	c.release(b.Digest)
	a = use("a") // a is now the most recently used
	c.release(a.Digest)
	cimg := use("c")
	if _, err := os.Stat(b.Root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("b, the least recently used, was not evicted: %v", err)
	}
	if _, err := os.Stat(a.Root); err != nil {
		t.Fatalf("a was evicted: %v", err)
	}
	// a and c in use: b does not fit.
	a = use("a")
	if _, err := c.acquire(ctx, "oci-layout:"+dir+":b"); !errors.Is(err, errCacheFull) {
		t.Fatalf("a pull with every other image in use: %v", err)
	}
	c.release(a.Digest)
	c.release(cimg.Digest)
	if used, maxBytes, _, _, failures, images := c.status(); used > maxBytes || failures != 1 || len(images) != 2 {
		t.Fatalf("used %d of %d, %d failures, %d images", used, maxBytes, failures, len(images))
	}
}
