package main

import (
	"bytes"
	"encoding/json"
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

	"herd/agent"
	"herd/api"
	"herd/internal/testimage"
	"herd/test"
)

// oneFileImage is an image of one layer holding one file.
func oneFileImage(t *testing.T, file, body string) v1.Image {
	return testimage.Image(t, nil, testimage.Layer(t, testimage.File{Name: file, Body: body}))
}

// The image commands against a cluster with a real agent: an archive
// imported from a file and from standard input, a pull from a registry
// with its pinned reference, the node's cache listed, and the mistakes a
// user makes refused with what to do.
func TestImageCommands(t *testing.T) {
	c := test.NewCluster(t, 3)
	h := c.StartAgent(agent.Config{ID: "edge-1", Slots: 1})
	test.WaitRegistered(t, h)
	vars := map[string]string{"HERD_ADDR": c.Replicas[c.Follower()].Cfg.HTTPAddr}
	herd := func(stdin io.Reader, args ...string) (string, string, int) {
		e, out, errb := testEnv(vars)
		if stdin != nil {
			e.stdin = stdin
		}
		code := run(e, args)
		return out.String(), errb.String(), code
	}

	archive := filepath.Join(t.TempDir(), "tools.tar")
	tag, err := name.NewTag("site/tools:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(archive, tag, oneFileImage(t, "tool", "v1")); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := herd(nil, "image", "import", archive, "-node", "edge-1", "-tag", "site/tools:stable")
	if code != 0 || !strings.Contains(out, "edge-1") || !strings.Contains(out, "site/tools:1, site/tools:stable") || !strings.Contains(out, "Pinned: index.docker.io/site/tools@sha256:") {
		t.Fatalf("image import exit %d:\n%s%s", code, out, errOut)
	}
	raw, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code = herd(bytes.NewReader(raw), "image", "import", "-", "-node", "edge-1", "-o", "json")
	var load api.ImageLoad
	if code != 0 || json.Unmarshal([]byte(out), &load) != nil || len(load.Images) != 1 || load.Images[0].Node != "edge-1" || load.Images[0].Layers != 1 {
		t.Fatalf("image import - -o json exit %d:\n%s%s", code, out, errOut)
	}

	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	ref := strings.TrimPrefix(reg.URL, "http://") + "/team/model:3"
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	pushed := oneFileImage(t, "model", "weights")
	if err := remote.Write(r, pushed); err != nil {
		t.Fatal(err)
	}
	digest, err := pushed.Digest()
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code = herd(nil, "image", "pull", "-node", "edge-1", ref)
	pinned := strings.TrimSuffix(ref, ":3") + "@" + digest.String()
	if code != 0 || !strings.Contains(out, digest.String()) || !strings.Contains(out, "Pinned: "+pinned) {
		t.Fatalf("image pull exit %d (want digest %s):\n%s%s", code, digest, out, errOut)
	}

	out, errOut, code = herd(nil, "image", "list", "-node", "edge-1", "-o", "json")
	var listed []struct {
		Node   string            `json:"node"`
		Images []api.CachedImage `json:"images"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed) != 1 {
		t.Fatalf("image list exit %d:\n%s%s", code, out, errOut)
	}
	var names []string
	for _, im := range listed[0].Images {
		names = append(names, im.Names...)
	}
	for _, want := range []string{"site/tools:1", "site/tools:stable", "index.docker.io/site/tools:1", ref} {
		if !slices.Contains(names, want) {
			t.Errorf("the node's cache lacks %s: %v", want, names)
		}
	}

	junk := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(junk, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"image", "import", junk, "-node", "edge-1"}, 1, "not an image archive"},
		{[]string{"image", "import", filepath.Join(t.TempDir(), "missing.tar"), "-node", "edge-1"}, 1, "no such file"},
		{[]string{"image", "import", "-node", "edge-1"}, 2, "exactly one archive file"},
		{[]string{"image", "pull", "-node", "edge-1", strings.TrimPrefix(reg.URL, "http://") + "/team/none:1"}, 1, "unknown image or tag"},
		{[]string{"image", "pull", "-node", "edge-9", ref}, 1, `node "edge-9" not found`},
		{[]string{"image", "pull", "-node", "edge-1", "Not A Ref"}, 1, "image reference"},
	} {
		_, errOut, code := herd(nil, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("herd %s: exit %d, %q; want exit %d saying %q", strings.Join(tc.args, " "), code, errOut, tc.code, tc.want)
		}
	}

	// Without -node, the commands act on every node that runs containers:
	// this one, when this machine runs them; otherwise none, and the
	// message says how to name one.
	out, errOut, code = herd(nil, "image", "list")
	if rt, _ := h.Agent.ContainerRuntime(); rt != "" {
		if code != 0 || !strings.Contains(out, "edge-1") {
			t.Fatalf("image list over the nodes with a runtime: exit %d\n%s%s", code, out, errOut)
		}
	} else if code != 1 || !strings.Contains(errOut, "no node that is up runs containers") || !strings.Contains(errOut, "-node") {
		t.Fatalf("image list with no node running containers: exit %d\n%s%s", code, out, errOut)
	}
}
