package agent

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// dockerSave writes images as `docker save` does (manifest.json with
// RepoTags) and returns the file.
func dockerSave(t *testing.T, images map[string]v1.Image) string {
	t.Helper()
	refs := map[name.Reference]v1.Image{}
	for tag, img := range images {
		r, err := name.NewTag(tag)
		if err != nil {
			t.Fatal(err)
		}
		refs[r] = img
	}
	file := filepath.Join(t.TempDir(), "saved.tar")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := tarball.MultiRefWrite(refs, f); err != nil {
		t.Fatal(err)
	}
	return file
}

// tarOf writes dir's files into a tar archive (an OCI archive when dir is
// a layout) and returns the file.
func tarOf(t *testing.T, dir string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "archive.tar")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return file
}

func gzipOf(t *testing.T, file string) string {
	t.Helper()
	in, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := file + ".gz"
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zw := gzip.NewWriter(f)
	if _, err := zw.Write(in); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// acquireFile acquires ref from the cache, which must already hold it,
// and reads one of its files.
func acquireFile(t *testing.T, c *imageCache, ref, file string) string {
	t.Helper()
	img, err := c.acquire(context.Background(), ref)
	if err != nil {
		t.Fatalf("acquire %s: %v", ref, err)
	}
	defer c.release(img.Digest)
	if !img.Hit {
		t.Fatalf("acquire %s pulled: the import should have cached it", ref)
	}
	b, err := os.ReadFile(filepath.Join(img.Root, file))
	if err != nil {
		t.Fatalf("acquire %s: %v", ref, err)
	}
	return string(b)
}

// An archive's images are stored under their names and found by a task
// that names them as written, by their full name, or pinned by digest,
// without any registry (the references name none that exists).
func TestImportedArchivesAreFoundByNameAndDigest(t *testing.T) {
	tools := imageOf(t, layerOf(t, entry{Name: "bin/", Type: tar.TypeDir}, entry{Name: "bin/tool", Body: "tools v1"}))
	other := imageOf(t, layerOf(t, entry{Name: "other", Body: "other v3"}))
	saved := dockerSave(t, map[string]v1.Image{"tools:1": tools, "registry.lan/team/other:3": other})
	named := layoutWith(t, map[string]v1.Image{"registry.lan/oci/tool:2": tools})
	unnamed := layoutWith(t, map[string]v1.Image{"": other})

	cases := []struct {
		name    string
		archive string
		tags    []string
		// want maps each reference a task may name to the file it reads.
		want map[string][2]string
	}{
		{"docker save", saved, nil, map[string][2]string{
			"tools:1":                   {"bin/tool", "tools v1"},
			"docker.io/library/tools:1": {"bin/tool", "tools v1"},
			"registry.lan/team/other:3": {"other", "other v3"},
		}},
		{"docker save, gzip-compressed", gzipOf(t, saved), nil, map[string][2]string{
			"index.docker.io/library/tools:1": {"bin/tool", "tools v1"},
		}},
		{"OCI archive named by its annotation", tarOf(t, named), nil, map[string][2]string{
			"registry.lan/oci/tool:2": {"bin/tool", "tools v1"},
		}},
		{"OCI archive named by a tag", tarOf(t, unnamed), []string{"site/other:7"}, map[string][2]string{
			"site/other:7": {"other", "other v3"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := newImageCache(t.TempDir(), 1<<30, nil, "")
			if err != nil {
				t.Fatal(err)
			}
			loaded, err := c.importArchive(context.Background(), tc.archive, tc.tags)
			if err != nil {
				t.Fatal(err)
			}
			for ref, f := range tc.want {
				if got := acquireFile(t, c, ref, f[0]); got != f[1] {
					t.Errorf("%s: %s reads %q, want %q", ref, f[0], got, f[1])
				}
			}
			for _, l := range loaded {
				if !strings.HasSuffix(l.Pinned, "@"+l.Digest) || l.Layers != 1 || l.Bytes == 0 {
					t.Errorf("loaded %+v: want a pinned reference, one layer, some bytes", l)
				}
				img, err := c.acquire(context.Background(), l.Pinned)
				if err != nil || !img.Hit || img.Digest != l.Digest {
					t.Errorf("pinned %s: %+v, %v; want the cached image", l.Pinned, img, err)
				}
				c.release(img.Digest)
			}
			if c.pulls != 0 {
				t.Errorf("%d pulls: every reference should have been found in the cache", c.pulls)
			}
		})
	}
}

// What cannot be imported says why, and leaves the cache as it was.
func TestImportRefusesWhatItCannotRead(t *testing.T) {
	img := imageOf(t, layerOf(t, entry{Name: "f", Body: "x"}))
	dir := t.TempDir()
	notImage := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notImage, []byte("not a tar at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	plainTar := tarOf(t, func() string {
		d := t.TempDir()
		_ = os.WriteFile(filepath.Join(d, "readme"), []byte("hi"), 0o600)
		return d
	}())
	escaping := filepath.Join(dir, "escape.tar")
	writeTar(t, escaping, func(tw *tar.Writer) {
		_ = tw.WriteHeader(&tar.Header{Name: "oci-layout", Typeflag: tar.TypeReg, Size: 2, Mode: 0o644})
		_, _ = tw.Write([]byte("{}"))
		_ = tw.WriteHeader(&tar.Header{Name: "index.json", Typeflag: tar.TypeReg, Size: 2, Mode: 0o644})
		_, _ = tw.Write([]byte("{}"))
		_ = tw.WriteHeader(&tar.Header{Name: "blobs", Typeflag: tar.TypeSymlink, Linkname: "/etc"})
	})
	cases := []struct {
		name, file string
		tags       []string
		want       string
	}{
		{"not a tar", notImage, nil, "tar"},
		{"a tar of something else", plainTar, nil, "neither a docker/podman save tarball"},
		{"a link out of the archive", escaping, nil, "files and directories only"},
		{"an unnamed image", tarOf(t, layoutWith(t, map[string]v1.Image{"": img})), nil, "has no name: give one with a tag"},
		{"a bad tag", dockerSave(t, map[string]v1.Image{"a:1": img}), []string{"Bad Tag!"}, `tag "Bad Tag!"`},
		{"a tag for several images", dockerSave(t, map[string]v1.Image{"a:1": img, "b:1": imageOf(t, layerOf(t, entry{Name: "g", Body: "y"}))}), []string{"c:1"}, "holds 2 images"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := newImageCache(t.TempDir(), 1<<30, nil, "")
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.importArchive(context.Background(), tc.file, tc.tags)
			if !errors.Is(err, errBadArchive) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("import: %v; want a bad archive saying %q", err, tc.want)
			}
			if len(c.state.Images) != 0 || len(c.state.Refs) != 0 {
				t.Fatalf("the cache holds %v after a refused import", c.state.Refs)
			}
		})
	}
}

func writeTar(t *testing.T, file string, fill func(*tar.Writer)) {
	t.Helper()
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	fill(tw)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// herd image pull asks the registry even for a cached reference, so a
// moved tag is followed; the image it replaced stays reachable by its
// digest until evicted, and the cache's status no longer gives it the
// moved name.
func TestPullFollowsAMovedTag(t *testing.T) {
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	ref := strings.TrimPrefix(reg.URL, "http://") + "/tools/moving:1"
	push := func(body string) v1.Image {
		img := imageOf(t, layerOf(t, entry{Name: "version", Body: body}))
		r, err := name.ParseReference(ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(r, img); err != nil {
			t.Fatal(err)
		}
		return img
	}
	c, err := newImageCache(t.TempDir(), 1<<30, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	push("one")
	first, err := c.pullFresh(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	push("two")
	if got := acquireFile(t, c, ref, "version"); got != "one" {
		t.Fatalf("a task's acquire reads %q: the cache should answer without the registry", got)
	}
	second, err := c.pullFresh(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if second.Digest == first.Digest {
		t.Fatal("the pull did not follow the moved tag")
	}
	if got := acquireFile(t, c, ref, "version"); got != "two" {
		t.Fatalf("after the pull the reference reads %q, want two", got)
	}
	if got := acquireFile(t, c, first.Pinned, "version"); got != "one" {
		t.Fatalf("the replaced image pinned by digest reads %q, want one", got)
	}
	_, _, _, _, _, images := c.status()
	for _, im := range images {
		if im.Digest == first.Digest && (im.Ref != "" || len(im.Names) != 0) {
			t.Errorf("the replaced image is still shown as %q %v", im.Ref, im.Names)
		}
		if im.Digest == second.Digest && (im.Ref != ref || !slices.Contains(im.Names, ref)) {
			t.Errorf("the pulled image is shown as %q %v, want %s", im.Ref, im.Names, ref)
		}
	}
	if _, err := c.pullFresh(ctx, "oci-layout:/srv/x"); !errors.Is(err, errBadArchive) {
		t.Errorf("pull of a layout path: %v, want refused as the caller's mistake", err)
	}
}
