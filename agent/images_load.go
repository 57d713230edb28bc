package agent

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"herd/api"
)

// errBadArchive is an upload that is not an image archive herd reads, or
// whose images cannot be named: the sender's mistake.
var errBadArchive = errors.New("not an image archive")

// pullFresh asks ref's registry for the image even when the cache holds
// the reference, so that a tag moved since is followed (tasks started
// afterwards get the new image; running ones keep theirs), and stores it.
func (c *imageCache) pullFresh(ctx context.Context, ref string) (api.ImageLoaded, error) {
	if strings.HasPrefix(ref, "oci-layout:") {
		return api.ImageLoaded{}, fmt.Errorf("%w: %s is a layout on the node's disk, read where a task names it; pull names a registry reference", errBadArchive, ref)
	}
	if _, err := name.ParseReference(ref, name.WeakValidation); err != nil {
		return api.ImageLoaded{}, fmt.Errorf("%w: image reference %q: %v", errBadArchive, ref, err)
	}
	c.mu.Lock()
	c.pulls++
	c.mu.Unlock()
	img, err := c.resolve(ctx, ref)
	if err == nil {
		return c.load(ctx, "pull "+ref, img, []string{ref})
	}
	c.mu.Lock()
	c.failures++
	c.mu.Unlock()
	return api.ImageLoaded{}, err
}

// load stores img under names (and their canonical forms) and answers
// what the node now holds; the image is not held in use afterwards.
func (c *imageCache) load(ctx context.Context, what string, img v1.Image, names []string) (api.ImageLoaded, error) {
	refs := slices.Clone(names)
	for _, n := range names {
		if canon := canonicalRef(n); canon != "" && !slices.Contains(refs, canon) {
			refs = append(refs, canon)
		}
	}
	p, err := c.store(ctx, what, img, refs...)
	if err != nil {
		return api.ImageLoaded{}, err
	}
	c.release(p.Digest)
	c.mu.Lock()
	defer c.mu.Unlock()
	out := api.ImageLoaded{Names: names, Digest: p.Digest, Pinned: pinnedRef(names[0], p.Digest)}
	if entry := c.state.Images[p.Digest]; entry != nil {
		out.Layers = len(entry.Layers)
		for _, l := range entry.Layers {
			if cl := c.state.Layers[l]; cl != nil {
				out.Bytes += cl.Bytes
			}
		}
	}
	return out, nil
}

// pinnedRef is ref's repository with the digest: the reference that
// names exactly this image, in the cache or in the registry.
func pinnedRef(ref, digest string) string {
	r, err := name.ParseReference(ref, name.WeakValidation)
	if err != nil {
		return ""
	}
	return r.Context().String() + "@" + digest
}

// importArchive stores every image of the archive at file: a `docker
// save` or `podman save` tarball (manifest.json; gzip-compressed or not)
// or an OCI archive (a tar of an OCI image layout). Images are named by
// the archive (RepoTags; the io.containerd.image.name or
// org.opencontainers.image.ref.name annotation) and by tags, which an
// archive of one image may add.
func (c *imageCache) importArchive(ctx context.Context, file string, tags []string) ([]api.ImageLoaded, error) {
	for _, t := range tags {
		if _, err := name.ParseReference(t, name.WeakValidation); err != nil {
			return nil, fmt.Errorf("%w: tag %q: %v", errBadArchive, t, err)
		}
	}
	file, err := c.gunzipped(file)
	if err != nil {
		return nil, err
	}
	entries, err := tarEntries(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errBadArchive, err)
	}
	var images []namedImage
	switch {
	case entries["manifest.json"]:
		images, err = dockerArchiveImages(file)
	case entries["index.json"] && entries["oci-layout"]:
		images, err = c.ociArchiveImages(file)
	default:
		return nil, fmt.Errorf("%w: neither a docker/podman save tarball (it has no manifest.json) nor an OCI archive (no oci-layout and index.json)", errBadArchive)
	}
	if err != nil {
		return nil, err
	}
	if len(tags) > 0 {
		if len(images) != 1 {
			return nil, fmt.Errorf("%w: the archive holds %d images; a tag names an archive of one image only", errBadArchive, len(images))
		}
		images[0].names = append(images[0].names, tags...)
	}
	var out []api.ImageLoaded
	for i, im := range images {
		if len(im.names) == 0 {
			return out, fmt.Errorf("%w: image %d of the archive has no name: give one with a tag", errBadArchive, i+1)
		}
		loaded, err := c.load(ctx, "import "+im.names[0], im.img, im.names)
		if err != nil {
			return out, err
		}
		out = append(out, loaded)
	}
	return out, nil
}

type namedImage struct {
	img   v1.Image
	names []string
}

// gunzipped is file itself, or, when it is gzip-compressed, its contents
// in a file beside it (a tarball's images are read by seeking in it).
func (c *imageCache) gunzipped(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	magic, _ := br.Peek(2)
	if len(magic) < 2 || magic[0] != 0x1f || magic[1] != 0x8b {
		return file, nil
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		return "", fmt.Errorf("%w: %v", errBadArchive, err)
	}
	out := file + ".tar"
	w, err := os.Create(out)
	if err != nil {
		return "", err
	}
	defer w.Close()
	if _, err := io.Copy(w, zr); err != nil {
		return "", fmt.Errorf("%w: gzip: %v", errBadArchive, err)
	}
	return out, w.Close()
}

// tarEntries lists the regular files of a tar archive.
func tarEntries(file string) (map[string]bool, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	out := map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("tar: %v", err)
		}
		out[path.Clean(strings.TrimPrefix(h.Name, "./"))] = true
	}
}

// dockerArchiveImages reads a docker/podman save tarball's images.
func dockerArchiveImages(file string) ([]namedImage, error) {
	opener := func() (io.ReadCloser, error) { return os.Open(file) }
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, fmt.Errorf("%w: manifest.json: %v", errBadArchive, err)
	}
	var out []namedImage
	for i, d := range m {
		var tag *name.Tag
		if len(d.RepoTags) > 0 {
			t, err := name.NewTag(d.RepoTags[0])
			if err != nil {
				return nil, fmt.Errorf("%w: image %d's tag %q: %v", errBadArchive, i+1, d.RepoTags[0], err)
			}
			tag = &t
		} else if len(m) > 1 {
			return nil, fmt.Errorf("%w: image %d of %d has no tag (saved by id); save images by name", errBadArchive, i+1, len(m))
		}
		img, err := tarball.Image(opener, tag)
		if err != nil {
			return nil, fmt.Errorf("%w: image %d: %v", errBadArchive, i+1, err)
		}
		out = append(out, namedImage{img: img, names: slices.Clone(d.RepoTags)})
	}
	return out, nil
}

// ociArchiveImages unpacks an OCI archive into a layout beside file and
// reads its images: each manifest of the index, or of a nested index the
// one for this machine's platform.
func (c *imageCache) ociArchiveImages(file string) ([]namedImage, error) {
	dir := file + ".layout"
	if err := extractArchive(file, dir); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadArchive, err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: OCI layout: %v", errBadArchive, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("%w: OCI layout: %v", errBadArchive, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("%w: OCI layout: %v", errBadArchive, err)
	}
	var out []namedImage
	for i, d := range m.Manifests {
		var names []string
		for _, key := range []string{"io.containerd.image.name", "org.opencontainers.image.ref.name"} {
			if n := d.Annotations[key]; n != "" {
				if _, err := name.ParseReference(n, name.WeakValidation); err == nil {
					names = append(names, n)
					break
				}
			}
		}
		img, err := platformImage(idx, d)
		if err != nil {
			return nil, fmt.Errorf("%w: image %d: %v", errBadArchive, i+1, err)
		}
		out = append(out, namedImage{img: img, names: names})
	}
	return out, nil
}

// platformImage is the image d describes; when d is an index, its image
// for linux on this machine's architecture.
func platformImage(idx v1.ImageIndex, d v1.Descriptor) (v1.Image, error) {
	if !d.MediaType.IsIndex() {
		return idx.Image(d.Digest)
	}
	child, err := idx.ImageIndex(d.Digest)
	if err != nil {
		return nil, err
	}
	cm, err := child.IndexManifest()
	if err != nil {
		return nil, err
	}
	var seen []string
	for _, m := range cm.Manifests {
		if m.Platform == nil {
			continue
		}
		if m.Platform.OS == "linux" && m.Platform.Architecture == runtime.GOARCH {
			return child.Image(m.Digest)
		}
		seen = append(seen, m.Platform.OS+"/"+m.Platform.Architecture)
	}
	return nil, fmt.Errorf("no image for linux/%s (it has %s)", runtime.GOARCH, strings.Join(seen, ", "))
}

// extractArchive writes an archive's directories and regular files under
// dir; anything else, and any name that would leave dir, is refused.
func extractArchive(file, dir string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("tar: %v", err)
		}
		rel := path.Clean("/" + h.Name)[1:]
		if rel == "" {
			continue
		}
		dst := filepath.Join(dir, filepath.FromSlash(rel))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
				return err
			}
			w, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, tr)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: an OCI archive holds files and directories only", h.Name)
		}
	}
}

// handleImagePull pulls the body's reference into the cache.
func (a *Agent) handleImagePull(w http.ResponseWriter, r *http.Request) {
	var req api.ImagePullRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil || req.Ref == "" {
		writeDataError(w, http.StatusBadRequest, "the body is {\"ref\": \"REGISTRY/NAME:TAG\"}")
		return
	}
	loaded, err := a.images.pullFresh(r.Context(), req.Ref)
	if err != nil {
		writeDataError(w, imageErrorStatus(err), err.Error())
		return
	}
	loaded.Node = a.cfg.ID
	a.logger.Info("image pulled", "ref", req.Ref, "digest", loaded.Digest)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(api.ImageLoad{Images: []api.ImageLoaded{loaded}})
}

// handleImageImport stores the images of the archive in the body (at
// most the cache's size), named by the archive and by ?tag=.
func (a *Agent) handleImageImport(w http.ResponseWriter, r *http.Request) {
	limit := a.images.maxBytes
	if limit <= 0 {
		limit = 1 << 40
	}
	dir, err := os.MkdirTemp(filepath.Join(a.images.dir, "tmp"), "import-")
	if err != nil {
		writeDataError(w, http.StatusInternalServerError, err.Error())
		return
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "archive")
	f, err := os.Create(file)
	if err != nil {
		writeDataError(w, http.StatusInternalServerError, err.Error())
		return
	}
	_, err = io.Copy(f, http.MaxBytesReader(w, r.Body, limit))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		writeDataError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the archive is larger than the image cache (%d MiB, -image-cache-mb)", limit>>20))
		return
	case err != nil:
		writeDataError(w, http.StatusBadRequest, "reading the archive: "+err.Error())
		return
	}
	loaded, err := a.images.importArchive(r.Context(), file, r.URL.Query()["tag"])
	if err != nil {
		writeDataError(w, imageErrorStatus(err), err.Error())
		return
	}
	for i := range loaded {
		loaded[i].Node = a.cfg.ID
		a.logger.Info("image imported", "names", loaded[i].Names, "digest", loaded[i].Digest)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(api.ImageLoad{Images: loaded})
}

// imageErrorStatus is the status of a failed pull or import: the
// sender's mistake, a full cache, or the registry's answer.
func imageErrorStatus(err error) int {
	switch {
	case errors.Is(err, errBadArchive):
		return http.StatusBadRequest
	case errors.Is(err, errCacheFull):
		return http.StatusInsufficientStorage
	default:
		return http.StatusBadGateway
	}
}
