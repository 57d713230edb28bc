package agent

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"herd/api"
)

// imageCache keeps OCI images on the node's disk, content-addressed:
// each layer unpacked once under layers/<digest>, and each image's root
// filesystem assembled from its layers with hard links under
// roots/<digest> (no data is copied, and images sharing a layer share
// its files). Containers get the root read-only, so one tree serves every
// attempt of the image at once. The cache holds at most maxBytes of
// unpacked layers; when a pull needs room, the least recently used
// images not in use are evicted with the layers only they hold.
//
// A reference once resolved is not asked of its registry again (as
// Kubernetes' IfNotPresent): the second run of an image pulls and unpacks
// nothing. Its state is in index.json, written after every change.
//
// The lock guards the state only: a pull talks to its registry and
// unpacks its layers without it, so a slow pull holds back neither the
// attempts of images already cached nor the end of attempts. Acquires of
// one reference share one pull, pulls needing one layer share its unpack,
// and what a pull in flight has or is unpacking (pinned) is not evicted.
type imageCache struct {
	dir      string
	maxBytes int64
	// insecure lists registry hosts reached over plain HTTP; loopback
	// registries always are.
	insecure []string
	auth     registryAuth

	mu    sync.Mutex
	state cacheState
	inUse map[string]int // image digest -> running attempts
	// pulling holds the pull in flight of a reference, unpacking the
	// unpack in flight of a layer: each channel closes when it ends.
	pulling, unpacking map[string]chan struct{}
	// pinnedLayers and pinnedImages count the pulls in flight that need
	// a layer or an image's root: eviction leaves them.
	pinnedLayers, pinnedImages map[string]int
	// pulls and hits count resolutions since the agent started.
	pulls, hits, failures int64
}

type cacheState struct {
	Refs   map[string]string       `json:"refs"`   // reference -> image digest
	Images map[string]*cachedImage `json:"images"` // by digest
	Layers map[string]*cachedLayer `json:"layers"` // by digest
}

type cachedImage struct {
	Ref        string    `json:"ref"`
	Layers     []string  `json:"layers"`
	Env        []string  `json:"env,omitempty"`
	Entrypoint []string  `json:"entrypoint,omitempty"`
	LastUsed   time.Time `json:"last_used"`
}

type cachedLayer struct {
	Bytes int64 `json:"bytes"`
}

// pulledImage is an image ready to run.
type pulledImage struct {
	Digest     string
	Root       string // the read-only root filesystem
	Env        []string
	Entrypoint []string
	// Hit: nothing was fetched or unpacked.
	Hit bool
}

// errCacheFull is a pull that does not fit even with everything else
// evicted.
var errCacheFull = errors.New("image cache full")

func newImageCache(dir string, maxBytes int64, insecure []string, authFile string) (*imageCache, error) {
	c := &imageCache{dir: dir, maxBytes: maxBytes, insecure: insecure, auth: registryAuth{path: authFile}, inUse: map[string]int{},
		pulling: map[string]chan struct{}{}, unpacking: map[string]chan struct{}{}, pinnedLayers: map[string]int{}, pinnedImages: map[string]int{}}
	if _, err := c.auth.load(); err != nil {
		return nil, err
	}
	for _, d := range []string{"layers", "roots", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("image cache: %w", err)
		}
	}
	// Unfinished unpacks of a previous run are garbage.
	_ = os.RemoveAll(filepath.Join(dir, "tmp"))
	_ = os.MkdirAll(filepath.Join(dir, "tmp"), 0o700)
	c.state = cacheState{Refs: map[string]string{}, Images: map[string]*cachedImage{}, Layers: map[string]*cachedLayer{}}
	if b, err := os.ReadFile(filepath.Join(dir, "index.json")); err == nil {
		if err := json.Unmarshal(b, &c.state); err != nil {
			return nil, fmt.Errorf("image cache index: %w", err)
		}
	}
	if c.state.Refs == nil {
		c.state.Refs = map[string]string{}
	}
	if c.state.Images == nil {
		c.state.Images = map[string]*cachedImage{}
	}
	if c.state.Layers == nil {
		c.state.Layers = map[string]*cachedLayer{}
	}
	return c, nil
}

func (c *imageCache) saveLocked() error {
	b, err := json.Marshal(c.state)
	if err != nil {
		return err
	}
	tmp := filepath.Join(c.dir, "index.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(c.dir, "index.json"))
}

// acquire returns the image named ref, pulling and unpacking what the
// cache lacks, and holds it in use until release.
func (c *imageCache) acquire(ctx context.Context, ref string) (pulledImage, error) {
	c.mu.Lock()
	for {
		if d, ok := c.lookupLocked(ref); ok && c.completeLocked(d) {
			defer c.mu.Unlock()
			img := c.state.Images[d]
			img.LastUsed = time.Now()
			c.inUse[d]++
			c.hits++
			_ = c.saveLocked()
			return pulledImage{Digest: d, Root: c.rootDir(d), Env: img.Env, Entrypoint: img.Entrypoint, Hit: true}, nil
		}
		busy, ok := c.pulling[ref]
		if !ok {
			break
		}
		// Another attempt pulls it: its outcome decides (a failed pull is
		// tried again here).
		c.mu.Unlock()
		if err := awaitClosed(ctx, busy); err != nil {
			return pulledImage{}, fmt.Errorf("pull %s: %w", ref, err)
		}
		c.mu.Lock()
	}
	done := make(chan struct{})
	c.pulling[ref] = done
	c.pulls++
	c.mu.Unlock()
	out, err := c.pull(ctx, ref)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pulling, ref)
	close(done)
	if err != nil {
		c.failures++
		return pulledImage{}, err
	}
	return out, nil
}

// lookupLocked finds the cached image a reference names: by the
// reference as written, by its canonical form (tools:1 is
// index.docker.io/library/tools:1, as an imported archive's names are
// recorded too), or, for a reference pinned by digest (NAME@sha256:…), by
// the digest alone, wherever the image came from.
func (c *imageCache) lookupLocked(ref string) (string, bool) {
	if d, ok := c.state.Refs[ref]; ok {
		return d, true
	}
	if canon := canonicalRef(ref); canon != "" {
		if d, ok := c.state.Refs[canon]; ok {
			return d, true
		}
	}
	if _, d, ok := strings.Cut(ref, "@"); ok && strings.HasPrefix(d, "sha256:") {
		if _, ok := c.state.Images[d]; ok {
			return d, true
		}
	}
	return "", false
}

// canonicalRef is a registry reference's full name, or "" for what is
// not one (an oci-layout: path, a malformed name).
func canonicalRef(ref string) string {
	if strings.HasPrefix(ref, "oci-layout:") {
		return ""
	}
	r, err := name.ParseReference(ref, name.WeakValidation)
	if err != nil {
		return ""
	}
	return r.Name()
}

func awaitClosed(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release ends one use of an image.
func (c *imageCache) release(digest string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inUse[digest]--; c.inUse[digest] <= 0 {
		delete(c.inUse, digest)
	}
}

func (c *imageCache) completeLocked(digest string) bool {
	img, ok := c.state.Images[digest]
	if !ok {
		return false
	}
	for _, l := range img.Layers {
		if _, ok := c.state.Layers[l]; !ok {
			return false
		}
	}
	_, err := os.Stat(c.rootDir(digest))
	return err == nil
}

func (c *imageCache) rootDir(digest string) string {
	return filepath.Join(c.dir, "roots", strings.ReplaceAll(digest, ":", "-"))
}

func (c *imageCache) layerDir(digest string) string {
	return filepath.Join(c.dir, "layers", strings.ReplaceAll(digest, ":", "-"))
}

// resolve finds the image a reference names: in an OCI image layout on
// disk (oci-layout:PATH[:TAG]) or in a registry.
func (c *imageCache) resolve(ctx context.Context, ref string) (v1.Image, error) {
	if rest, ok := strings.CutPrefix(ref, "oci-layout:"); ok {
		return layoutImage(rest)
	}
	var opts []name.Option
	if c.insecureHost(ref) {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return nil, fmt.Errorf("image reference %q: %w", ref, err)
	}
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}), remote.WithAuthFromKeychain(c.auth))
	if err != nil {
		var te *transport.Error
		switch {
		case errors.As(err, &te) && te.StatusCode == 404:
			return nil, fmt.Errorf("pull %s: unknown image or tag: %w", ref, err)
		case errors.As(err, &te):
			return nil, fmt.Errorf("pull %s: the registry refused: %w", ref, err)
		default:
			return nil, fmt.Errorf("pull %s: registry unreachable: %w", ref, err)
		}
	}
	return img, nil
}

// insecureHost reports whether ref's registry is reached over HTTP.
func (c *imageCache) insecureHost(ref string) bool {
	host, _, _ := strings.Cut(ref, "/")
	if slices.Contains(c.insecure, host) {
		return true
	}
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = host
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// layoutImage reads PATH[:TAG] of an OCI image layout: the manifest whose
// ref.name annotation is TAG, or the only one.
func layoutImage(spec string) (v1.Image, error) {
	dir, tag := spec, ""
	if i := strings.LastIndexByte(spec, ':'); i > 0 {
		if _, err := os.Stat(filepath.Join(spec, "index.json")); err != nil {
			dir, tag = spec[:i], spec[i+1:]
		}
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("image layout %s: %w", dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("image layout %s: %w", dir, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("image layout %s: %w", dir, err)
	}
	var found []v1.Descriptor
	for _, d := range m.Manifests {
		if tag == "" || d.Annotations["org.opencontainers.image.ref.name"] == tag {
			found = append(found, d)
		}
	}
	switch {
	case len(found) == 0 && tag != "":
		return nil, fmt.Errorf("image layout %s has no image tagged %q", dir, tag)
	case len(found) != 1:
		return nil, fmt.Errorf("image layout %s holds %d images: name one with oci-layout:%s:TAG", dir, len(found), dir)
	}
	return idx.Image(found[0].Digest)
}

// pull fetches ref's image and stores it under ref.
func (c *imageCache) pull(ctx context.Context, ref string) (pulledImage, error) {
	img, err := c.resolve(ctx, ref)
	if err != nil {
		return pulledImage{}, err
	}
	return c.store(ctx, "pull "+ref, img, ref)
}

// store unpacks the layers of img the cache lacks, taking the lock only
// to read and change the state; on success the image is recorded under
// every one of refs (the first is the name its status shows) and held in
// use, in one step with its recording so that no eviction comes between.
// what begins its errors ("pull REF", "import FILE").
func (c *imageCache) store(ctx context.Context, what string, img v1.Image, refs ...string) (pulledImage, error) {
	ref := refs[0]
	digest, err := img.Digest()
	if err != nil {
		return pulledImage{}, fmt.Errorf("%s: %w", what, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return pulledImage{}, fmt.Errorf("%s: image config: %w", what, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return pulledImage{}, fmt.Errorf("%s: layers: %w", what, err)
	}
	d := digest.String()
	entry := &cachedImage{Ref: ref, Env: cfg.Config.Env, Entrypoint: cfg.Config.Entrypoint, LastUsed: time.Now()}
	// A pull that fails takes back the layers it unpacked, unless an
	// image or another pull holds them.
	var added, pinned []string
	ok := false
	c.mu.Lock()
	c.pinnedImages[d]++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.pinnedImages[d]--; c.pinnedImages[d] <= 0 {
			delete(c.pinnedImages, d)
		}
		for _, l := range pinned {
			if c.pinnedLayers[l]--; c.pinnedLayers[l] <= 0 {
				delete(c.pinnedLayers, l)
			}
		}
		if !ok {
			c.dropUnheldLocked(added)
		}
	}()
	for _, l := range layers {
		ld, err := l.Digest()
		if err != nil {
			return pulledImage{}, fmt.Errorf("%s: layer digest: %w", what, err)
		}
		entry.Layers = append(entry.Layers, ld.String())
		mine, err := c.claimLayer(ctx, ld.String(), &pinned)
		if err != nil {
			return pulledImage{}, fmt.Errorf("%s: %w", what, err)
		}
		if !mine {
			continue // cached already, or unpacked by another pull
		}
		recorded, err := c.unpackClaimed(l, ld.String(), d)
		if recorded {
			added = append(added, ld.String())
		}
		if err != nil {
			return pulledImage{}, fmt.Errorf("%s: layer %s: %w", what, ld, err)
		}
	}
	if _, err := os.Stat(c.rootDir(d)); err != nil {
		if err := c.assemble(entry.Layers, d); err != nil {
			return pulledImage{}, fmt.Errorf("%s: assemble root: %w", what, err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	prevImage, hadImage := c.state.Images[d]
	prevRefs := map[string]string{}
	for _, r := range refs {
		if old, ok := c.state.Refs[r]; ok {
			prevRefs[r] = old
		}
		c.state.Refs[r] = d
	}
	c.state.Images[d] = entry
	if err := c.saveLocked(); err != nil {
		delete(c.state.Images, d)
		if hadImage {
			c.state.Images[d] = prevImage
		}
		for _, r := range refs {
			delete(c.state.Refs, r)
		}
		maps.Copy(c.state.Refs, prevRefs)
		return pulledImage{}, fmt.Errorf("image cache index: %w", err)
	}

	c.inUse[d]++
	ok = true
	return pulledImage{Digest: d, Root: c.rootDir(d), Env: entry.Env, Entrypoint: entry.Entrypoint}, nil
}

// claimLayer pins a layer for the pull and tells whether the pull is to
// unpack it: not when the cache has it or once another pull's unpack of
// it succeeded (it is awaited).
func (c *imageCache) claimLayer(ctx context.Context, ld string, pinned *[]string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pinnedLayers[ld]++
	*pinned = append(*pinned, ld)
	for {
		if _, ok := c.state.Layers[ld]; ok {
			return false, nil
		}
		busy, ok := c.unpacking[ld]
		if !ok {
			c.unpacking[ld] = make(chan struct{})
			return true, nil
		}
		c.mu.Unlock()
		err := awaitClosed(ctx, busy)
		c.mu.Lock()
		if err != nil {
			return false, err
		}
	}
}

// unpackClaimed unpacks a layer claimed by claimLayer, having made room
// for it first, records it and tells whether it did; an error after the
// recording is of making room for the rest.
func (c *imageCache) unpackClaimed(l v1.Layer, ld, image string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer func() {
		close(c.unpacking[ld])
		delete(c.unpacking, ld)
	}()
	if size, err := l.Size(); err == nil {
		if err := c.makeRoomLocked(size, image); err != nil {
			return false, err
		}
	}
	c.mu.Unlock()
	n, err := c.unpackLayer(l, ld)
	c.mu.Lock()
	if err != nil {
		return false, err
	}
	c.state.Layers[ld] = &cachedLayer{Bytes: n}
	return true, c.makeRoomLocked(0, image)
}

// usedLocked is the unpacked bytes the cache holds.
func (c *imageCache) usedLocked() int64 {
	var n int64
	for _, l := range c.state.Layers {
		n += l.Bytes
	}
	return n
}

// makeRoomLocked evicts least recently used images, not in use and other
// than keep, until need more bytes fit under the cap.
func (c *imageCache) makeRoomLocked(need int64, keep string) error {
	if c.maxBytes <= 0 {
		return nil
	}
	for c.usedLocked()+need > c.maxBytes {
		var victim string
		for d, img := range c.state.Images {
			if d == keep || c.inUse[d] > 0 || c.pinnedImages[d] > 0 {
				continue
			}
			if victim == "" || img.LastUsed.Before(c.state.Images[victim].LastUsed) {
				victim = d
			}
		}
		if victim == "" {
			return fmt.Errorf("%w: %d of %d MiB used by images in use or being pulled", errCacheFull, (c.usedLocked()+need)>>20, c.maxBytes>>20)
		}
		c.evictLocked(victim)
	}
	return nil
}

func (c *imageCache) evictLocked(digest string) {
	img := c.state.Images[digest]
	delete(c.state.Images, digest)
	for r, d := range c.state.Refs {
		if d == digest {
			delete(c.state.Refs, r)
		}
	}
	_ = os.RemoveAll(c.rootDir(digest))
	c.dropUnheldLocked(img.Layers)
}

// dropUnheldLocked removes the layers of ls that no cached image holds
// and no pull in flight needs.
func (c *imageCache) dropUnheldLocked(ls []string) {
	held := map[string]bool{}
	for l := range c.pinnedLayers {
		held[l] = true
	}
	for _, other := range c.state.Images {
		for _, l := range other.Layers {
			held[l] = true
		}
	}
	for _, l := range ls {
		if !held[l] {
			delete(c.state.Layers, l)
			_ = os.RemoveAll(c.layerDir(l))
		}
	}
	_ = c.saveLocked()
}

// unpackLayer extracts a layer into its directory and returns the bytes
// written. Reading the layer to its end verifies its digest.
func (c *imageCache) unpackLayer(l v1.Layer, digest string) (int64, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	tmp, err := os.MkdirTemp(filepath.Join(c.dir, "tmp"), "layer-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	n, err := untar(rc, tmp)
	if err != nil {
		return 0, err
	}
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return 0, fmt.Errorf("digest check: %w", err)
	}
	if err := rc.Close(); err != nil {
		return 0, fmt.Errorf("digest check: %w", err)
	}
	dst := c.layerDir(digest)
	_ = os.RemoveAll(dst)
	if err := os.Rename(tmp, dst); err != nil {
		return 0, err
	}
	return n, nil
}

// untar writes a tar stream under root, refusing entries that would land
// outside it through a symbolic link ("..", cleaned against the root,
// cannot climb above it). Whiteouts
// (.wh.NAME) are kept as they are: assemble applies them.
func untar(r io.Reader, root string) (int64, error) {
	tr := tar.NewReader(r)
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, fmt.Errorf("read layer: %w", err)
		}
		rel := path.Clean("/" + h.Name)[1:]
		if rel == "" {
			continue
		}
		target := filepath.Join(root, filepath.FromSlash(rel))
		if err := noLinkInPath(root, filepath.Dir(target)); err != nil {
			return total, fmt.Errorf("layer entry %q: %w", h.Name, err)
		}
		mode := fs.FileMode(h.Mode).Perm() | fs.FileMode(h.Mode)&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return total, err
			}
			_ = os.Chmod(target, mode|0o700)
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return total, err
			}
			_ = os.Remove(target)
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
			if err != nil {
				return total, err
			}
			n, err := io.Copy(f, tr)
			total += n
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return total, err
			}
			_ = os.Chmod(target, mode)
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return total, err
			}
			_ = os.Remove(target)
			// A link is resolved inside the container's root, not here.
			if err := os.Symlink(h.Linkname, target); err != nil {
				return total, err
			}
		case tar.TypeLink:
			src := path.Clean("/" + h.Linkname)[1:]
			if err := noLinkInPath(root, filepath.Join(root, filepath.FromSlash(src))); err != nil {
				return total, fmt.Errorf("layer entry %q: %w", h.Name, err)
			}
			_ = os.Remove(target)
			if err := os.Link(filepath.Join(root, filepath.FromSlash(src)), target); err != nil {
				return total, err
			}
		default:
			// Devices, FIFOs and the like are not kept: containers get
			// their /dev from the runtime.
		}
	}
}

// noLinkInPath fails when a component of dir below root is a symbolic
// link: writing through it could land outside the root.
func noLinkInPath(root, dir string) error {
	rel, err := filepath.Rel(root, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("path %s leaves the root", dir)
	}
	if rel == "." {
		return nil
	}
	p := root
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("path goes through the symbolic link %s", p)
		}
	}
	return nil
}

// assemble builds an image's root from its layers, lowest first: files
// hard-linked from the layer directories, whiteouts removing what lower
// layers put there, an opaque whiteout emptying its directory.
func (c *imageCache) assemble(layers []string, digest string) error {
	tmp, err := os.MkdirTemp(filepath.Join(c.dir, "tmp"), "root-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, l := range layers {
		src := c.layerDir(l)
		err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(src, p)
			if rel == "." {
				return nil
			}
			base := filepath.Base(rel)
			dst := filepath.Join(tmp, rel)
			switch {
			case base == ".wh..wh..opq":
				entries, _ := os.ReadDir(filepath.Dir(dst))
				for _, e := range entries {
					_ = os.RemoveAll(filepath.Join(filepath.Dir(dst), e.Name()))
				}
				return nil
			case strings.HasPrefix(base, ".wh."):
				return os.RemoveAll(filepath.Join(filepath.Dir(dst), strings.TrimPrefix(base, ".wh.")))
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			if d.IsDir() {
				if fi, err := os.Lstat(dst); err == nil && !fi.IsDir() {
					_ = os.Remove(dst)
				}
				if err := os.MkdirAll(dst, 0o755); err != nil {
					return err
				}
				return os.Chmod(dst, info.Mode().Perm()|info.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
			}
			_ = os.RemoveAll(dst)
			if info.Mode()&fs.ModeSymlink != 0 {
				target, err := os.Readlink(p)
				if err != nil {
					return err
				}
				return os.Symlink(target, dst)
			}
			return os.Link(p, dst)
		})
		if err != nil {
			return err
		}
	}
	for _, d := range []string{"proc", "sys", "dev", "tmp", "work", "inputs", "datasets"} {
		_ = os.MkdirAll(filepath.Join(tmp, d), 0o755)
	}
	if err := os.Rename(tmp, c.rootDir(digest)); err != nil {
		// Another reference to the same image, pulled at the same time,
		// assembled the same root first.
		if _, serr := os.Stat(c.rootDir(digest)); serr == nil {
			return nil
		}
		return err
	}
	return nil
}

func (c *imageCache) status() (used, max int64, pulls, hits, failures int64, images []api.CachedImage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := map[string][]string{}
	for r, d := range c.state.Refs {
		names[d] = append(names[d], r)
	}
	for d, img := range c.state.Images {
		slices.Sort(names[d])
		ref := img.Ref
		if c.state.Refs[ref] != d {
			// Its name now points elsewhere (a tag pulled again or
			// imported anew): it is known by its other names, or by
			// its digest alone.
			ref = ""
			if len(names[d]) > 0 {
				ref = names[d][0]
			}
		}
		var n int64
		for _, l := range img.Layers {
			if cl := c.state.Layers[l]; cl != nil {
				n += cl.Bytes
			}
		}
		images = append(images, api.CachedImage{Ref: ref, Names: names[d], Digest: d, Bytes: n, Layers: len(img.Layers), LastUsed: img.LastUsed, InUse: c.inUse[d]})
	}
	sort.Slice(images, func(i, j int) bool { return images[i].LastUsed.After(images[j].LastUsed) })
	return c.usedLocked(), c.maxBytes, c.pulls, c.hits, c.failures, images
}
