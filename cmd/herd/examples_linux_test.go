//go:build linux

package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"herd/agent"
	"herd/internal/testbin"
	"herd/internal/testimage"
	"herd/test"
)

// The container example runs as its Dockerfile's comment says: the image
// the Dockerfile describes is saved as `docker save` writes it, piped into
// herd image import -, and run with herd task run. There is no Docker
// here: the test builds the image itself from the Dockerfile's
// instructions, with Debian's static busybox standing in for the busybox
// base image.
func TestContainerExampleRuns(t *testing.T) {
	bb := testbin.StaticBusybox()
	switch {
	case bb == nil:
		t.Skip("no static busybox to stand in for the example's base image (Debian: apt-get install busybox-static)")
	case os.Geteuid() != 0:
		t.Skip("containers need root (the agent runs them with the OCI runtime as root)")
	}
	const dir = "../../examples/container"
	steps := exampleCommands(t, filepath.Join(dir, "Dockerfile"))
	if len(steps) != 3 || !strings.HasPrefix(steps[0], "docker build -t ") || !strings.HasPrefix(steps[1], "docker save ") || !strings.HasPrefix(steps[2], "herd task run ") {
		t.Fatalf("the Dockerfile's comment should show build, save | import, run: %q", steps)
	}
	for _, docs := range []string{mustRead(t, "../../README.md"), mustRead(t, "../../docs/containers.md"), mustRead(t, "../../examples/README.md")} {
		for _, step := range steps {
			if !strings.Contains(strings.ReplaceAll(docs, `\|`, "|"), step) {
				t.Fatalf("the docs show the container example otherwise than its Dockerfile: %q is missing", step)
			}
		}
	}
	tag := strings.Fields(steps[0])[3]
	img := buildDockerfile(t, dir, bb)

	c := test.NewClusterWith(t, 3, test.Setup{})
	h := c.StartAgent(agent.Config{ID: "edge-1", Slots: 1})
	test.WaitRegistered(t, h)
	if rt, why := h.Agent.ContainerRuntime(); rt == "" {
		t.Skipf("this machine runs no containers: %s", why)
	}
	vars := map[string]string{"HERD_ADDR": c.Replicas[0].Cfg.HTTPAddr}

	// docker save TAG | herd image import -
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	var saved bytes.Buffer
	if err := tarball.Write(ref, img, &saved); err != nil {
		t.Fatal(err)
	}
	_, importCmd, _ := strings.Cut(steps[1], "| ")
	e, out, errb := testEnv(vars)
	e.stdin = &saved
	if code := run(e, strings.Fields(importCmd)[1:]); code != 0 || !strings.Contains(out.String(), tag) {
		t.Fatalf("%s: exit %d\n%s%s", importCmd, code, out, errb)
	}

	e, out, errb = testEnv(vars)
	if code := run(e, strings.Fields(steps[2])[1:]); code != 0 || !strings.Contains(out.String(), "hello from a container: 3 words") {
		t.Fatalf("%s: exit %d\n%s%s", steps[2], code, out, errb)
	}
}

func mustRead(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// exampleCommands are the indented commands of a file's leading comment.
func exampleCommands(t *testing.T, file string) []string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if cmd, ok := strings.CutPrefix(sc.Text(), "#   "); ok {
			out = append(out, strings.TrimSpace(cmd))
		}
	}
	return out
}

// buildDockerfile builds the image a Dockerfile of FROM busybox, ENV and
// COPY describes: one layer of busybox and its applets (the stand-in for
// the base image, with its PATH), one per COPY, the ENVs in the config.
// Any other instruction fails the test, so the example cannot grow one
// this test does not build.
func buildDockerfile(t *testing.T, dir string, bb []byte) v1.Image {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	var layers []v1.Layer
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, args, _ := strings.Cut(line, " ")
		switch instr {
		case "FROM":
			if !strings.HasPrefix(args, "busybox") {
				t.Fatalf("the example's base is %s; this test stands in for busybox only", args)
			}
			layers = append(layers, testimage.Layer(t, testimage.Busybox(bb, "sh", "echo", "wc", "tee", "cat", "ls")...))
		case "ENV":
			k, v, ok := strings.Cut(args, "=")
			if !ok {
				t.Fatalf("ENV %s: write ENV KEY=VALUE", args)
			}
			if uq, err := strconv.Unquote(v); err == nil {
				v = uq
			}
			env = append(env, k+"="+v)
		case "COPY":
			f := strings.Fields(args)
			if len(f) != 2 {
				t.Fatalf("COPY %s: one source and one destination", args)
			}
			src := filepath.Join(dir, f[0])
			body, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(src)
			if err != nil {
				t.Fatal(err)
			}
			layers = append(layers, testimage.Layer(t, testimage.WithParents(testimage.File{Name: strings.TrimPrefix(f[1], "/"), Mode: int64(st.Mode().Perm()), Body: string(body)})...))
		default:
			t.Fatalf("the example's Dockerfile uses %s, which this test does not build", instr)
		}
	}
	return testimage.Image(t, env, layers...)
}
