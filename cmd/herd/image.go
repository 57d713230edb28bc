package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"herd/api"
)

func runImage(e *env, args []string) error {
	return subcommands(e, "image", args, []command{
		{"pull", "pull a registry image into nodes' caches: pull REF", runImagePull},
		{"import", "put the images of a docker/podman save tarball or OCI archive into nodes' caches: import FILE", runImageImport},
		{"list", "list the images in nodes' caches", runImageList},
	})
}

// imageFlags are the flags the image commands share.
type imageFlags struct {
	clientFlags
	nodes   listFlag
	timeout time.Duration
}

func (f *imageFlags) register(e *env, name, argsUsage, summary string, more ...func(*flag.FlagSet)) func([]string) ([]string, error) {
	fs := newFlags(e, "image "+name, argsUsage, summary)
	f.clientFlags.register(e, fs, true)
	fs.Var(&f.nodes, "node", "the node to act on (repeatable or comma-separated; default: every node that is not DOWN and runs containers, oci@1)")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Minute, "give up after this long")
	for _, m := range more {
		m(fs)
	}
	return func(args []string) ([]string, error) {
		if err := parse(e, fs, args); err != nil {
			return nil, err
		}
		return fs.Args(), nil
	}
}

// targets are the nodes named by -node, or every node that is not DOWN
// and advertises oci@1.
func (f *imageFlags) targets(ctx context.Context, cl *api.Client) ([]string, error) {
	if len(f.nodes) > 0 {
		return f.nodes, nil
	}
	nodes, _, err := cl.ListNodes(ctx, api.ReadOptions{})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, n := range nodes {
		if n.Liveness != "DOWN" && slices.Contains(n.Capabilities["oci"], "1") {
			ids = append(ids, n.ID)
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("no node that is up runs containers (capability oci@1; herd node status ID says why not): name one with -node")
	}
	return ids, nil
}

func runImagePull(e *env, args []string) error {
	var f imageFlags
	parseArgs := f.register(e, "pull", "REF", "Have nodes' agents pull an image from its registry into their caches, even one\ncached already (a moved tag is followed), so tasks naming it start without a pull.\nPrints the digest and the pinned reference (NAME@sha256:…) that names exactly this image.")
	rest, err := parseArgs(args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usagef("image pull takes exactly one image reference (REGISTRY/NAME:TAG)")
	}
	return f.onNodes(e, "pull", func(ctx context.Context, cl *api.Client, node string) (api.ImageLoad, error) {
		return cl.PullImage(ctx, node, rest[0])
	})
}

func runImageImport(e *env, args []string) error {
	var f imageFlags
	var tags listFlag
	parseArgs := f.register(e, "import", "FILE", "Put the images of an archive into nodes' caches: a `docker save` or `podman save`\ntarball (gzip-compressed or not) or an OCI archive; FILE - reads standard input.\nThe images keep the names the archive gives them; -tag adds names to an archive of one image.\nTasks naming them find them in the cache, with no registry.",
		func(fs *flag.FlagSet) {
			fs.Var(&tags, "tag", "a name for the archive's image (repeatable): NAME:TAG or REGISTRY/NAME:TAG")
		})
	rest, err := parseArgs(args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usagef("image import takes exactly one archive file (or - for standard input)")
	}
	file := rest[0]
	if file == "-" {
		tmp, err := os.CreateTemp("", "herd-image-*.tar")
		if err != nil {
			return err
		}
		defer os.Remove(tmp.Name())
		_, err = io.Copy(tmp, e.stdin)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("image import: reading standard input: %w", err)
		}
		file = tmp.Name()
	} else if _, err := os.Stat(file); err != nil {
		return fmt.Errorf("image import: %w", err)
	}
	open := func() (io.ReadCloser, error) { return os.Open(file) }
	return f.onNodes(e, "import", func(ctx context.Context, cl *api.Client, node string) (api.ImageLoad, error) {
		return cl.ImportImage(ctx, node, open, tags)
	})
}

// onNodes runs do on every target node, four at a time, and prints what
// each now holds in the order of the nodes; it fails if any node did.
func (f *imageFlags) onNodes(e *env, verb string, do func(context.Context, *api.Client, string) (api.ImageLoad, error)) error {
	if err := f.checkOutput(); err != nil {
		return err
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	nodes, err := f.targets(ctx, cl)
	if err != nil {
		return fmt.Errorf("image %s: %w", verb, err)
	}
	loads := make([]api.ImageLoad, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			loads[i], errs[i] = do(ctx, cl, n)
		}()
	}
	wg.Wait()
	var all []api.ImageLoaded
	for _, l := range loads {
		all = append(all, l.Images...)
	}
	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			fmt.Fprintf(e.stderr, "herd: image %s on node %s: %v\n", verb, nodes[i], err)
		}
	}
	if f.structured() {
		if err := f.print(e.stdout, api.ImageLoad{Images: all}); err != nil {
			return err
		}
	} else if len(all) > 0 {
		writeLoaded(e.stdout, all)
	}
	switch {
	case failed == 1 && len(nodes) == 1:
		return fmt.Errorf("image %s: %w", verb, errs[0])
	case failed > 0:
		return fmt.Errorf("image %s failed on %d of %d nodes", verb, failed, len(nodes))
	}
	return nil
}

// writeLoaded prints the images put into caches, then, once per image,
// the reference pinned to its digest.
func writeLoaded(w io.Writer, all []api.ImageLoaded) {
	tb := &table{}
	tb.add("NODE", "IMAGE", "DIGEST", "SIZE", "LAYERS")
	var pinned []string
	for _, im := range all {
		tb.add(im.Node, strings.Join(im.Names, ", "), im.Digest, humanBytes(im.Bytes), strconv.Itoa(im.Layers))
		if im.Pinned != "" && !slices.Contains(pinned, im.Pinned) {
			pinned = append(pinned, im.Pinned)
		}
	}
	tb.write(w)
	for _, p := range pinned {
		fmt.Fprintf(w, "Pinned: %s\n", p)
	}
}

func runImageList(e *env, args []string) error {
	var f imageFlags
	parseArgs := f.register(e, "list", "", "List the images in nodes' caches (asked of each node's agent).")
	rest, err := parseArgs(args)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return usagef("image list takes no arguments (-node names the nodes)")
	}
	if err := f.checkOutput(); err != nil {
		return err
	}
	cl, err := f.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes, err := f.targets(ctx, cl)
	if err != nil {
		return fmt.Errorf("image list: %w", err)
	}
	type nodeImages struct {
		Node   string            `json:"node"`
		Images []api.CachedImage `json:"images"`
	}
	var out []nodeImages
	var errs []error
	for _, n := range nodes {
		ic, err := cl.NodeImages(ctx, n)
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", n, err))
			continue
		}
		out = append(out, nodeImages{Node: n, Images: ic.Images})
	}
	if f.structured() {
		if err := f.print(e.stdout, out); err != nil {
			return err
		}
	} else {
		tb := &table{}
		tb.add("NODE", "IMAGE", "DIGEST", "SIZE", "LAYERS", "LAST USED", "IN USE")
		for _, n := range out {
			for _, im := range n.Images {
				tb.add(n.Node, orDash(strings.Join(im.Names, ", ")), im.Digest, humanBytes(im.Bytes), strconv.Itoa(im.Layers), ago(im.LastUsed), strconv.Itoa(im.InUse))
			}
		}
		tb.write(e.stdout)
	}
	return errors.Join(errs...)
}
