//go:build linux

package test

import (
	"archive/tar"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"herd/agent"
	"herd/api"
	"herd/internal/testbin"
	"herd/internal/testimage"
	"herd/spec"
)

// staticBusybox is Debian's busybox-static, or the test skips.
func staticBusybox(t *testing.T) []byte {
	t.Helper()
	b := testbin.StaticBusybox()
	if b == nil {
		t.Skip("no static busybox to build a test image from (Debian: apt-get install busybox-static)")
	}
	return b
}

// busyboxImage is a one-layer image: busybox and its applets under /bin,
// and a file naming the image, /<marker>.
func busyboxImage(t *testing.T, bb []byte, marker string) v1.Image {
	t.Helper()
	files := testimage.Busybox(bb, "sh", "ls", "cat", "echo", "test", "sleep", "head", "tail", "grep", "true", "touch", "hostname", "wc", "ps")
	files = append(files, testimage.File{Name: "etc/", Type: tar.TypeDir}, testimage.File{Name: marker, Body: marker})
	return testimage.Image(t, []string{"PATH=/bin", "IMAGE=" + marker}, testimage.Layer(t, files...))
}

// pushImage serves img at ref in the in-process registry at host.
func pushImage(t *testing.T, host, repo string, img v1.Image) string {
	t.Helper()
	ref := host + "/" + repo
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	return ref
}

func ociSpec(name, image string, script string) api.TaskSpec {
	s := shSpec(name, script)
	s.Image = image
	return s
}

func attemptOf(t *testing.T, cl *api.Client, id string) api.Attempt {
	t.Helper()
	task, _, err := cl.GetTask(Ctx(t, time.Minute), id, api.ReadOptions{Consistent: true})
	if err != nil || len(task.Attempts) == 0 {
		t.Fatalf("task %s: %v (%d attempts)", id, err, len(task.Attempts))
	}
	return task.Attempts[len(task.Attempts)-1]
}

// sleepers lists the host's processes running "sleep 3600" (a
// container's processes are the host's too, in their own namespace).
func sleepers(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && string(b) == "sleep\x003600\x00" {
			out = append(out, e.Name())
		}
	}
	return out
}

// endedWith is the message of the task's latest finished event: how its
// last attempt ended.
func endedWith(t *testing.T, cl *api.Client, id string) string {
	t.Helper()
	task, _, err := cl.GetTask(Ctx(t, time.Minute), id, api.ReadOptions{Consistent: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := len(task.Timeline) - 1; i >= 0; i-- {
		if task.Timeline[i].Kind == "finished" {
			return task.Timeline[i].Message
		}
	}
	return ""
}

// Tasks from images: their own root filesystem and namespaces, the
// limits enforced by the runtime (an OOM kill said so), two images at
// once on one node not seeing each other, the second run of an image
// served from the cache, an image layout on disk, a pull that fails as
// a task failure, and no network when asked.
func TestOCITasks(t *testing.T) {
	bb := staticBusybox(t)
	if os.Geteuid() != 0 {
		t.Skip("containers need root (the agent runs them with the OCI runtime as root)")
	}
	regsrv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer regsrv.Close()
	host := strings.TrimPrefix(regsrv.URL, "http://")
	refA := pushImage(t, host, "test/alpha:1", busyboxImage(t, bb, "alpha-only"))
	refB := pushImage(t, host, "test/beta:1", busyboxImage(t, bb, "beta-only"))

	photos := t.TempDir()
	if err := os.WriteFile(photos+"/cat.jpg", []byte("meow"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := NewClusterWith(t, 3, gossipSetup())
	h := c.StartAgent(agent.Config{ID: "edge-1", Slots: 2, Datasets: map[string]string{"photos": photos}})
	WaitRegistered(t, h)
	if rt, why := h.Agent.ContainerRuntime(); rt == "" {
		t.Skipf("this machine runs no containers: %s", why)
	}
	cl := c.AllClient()
	node, _, err := cl.GetNode(Ctx(t, time.Minute), "edge-1", api.ReadOptions{Consistent: true})
	if err != nil || len(node.Capabilities["oci"]) == 0 {
		t.Fatalf("the node does not advertise oci@1: %v %v", node.Capabilities, err)
	}

	t.Run("own root and namespaces", func(t *testing.T) {
		id := submit(t, cl, ociSpec("iso", refA, `echo "pid=$$ image=$IMAGE work=$(pwd) host=$(hostname)"; ls /;
			test ! -e /etc/os-release && test -e /alpha-only && echo host-files-hidden
			touch /written 2>/dev/null && echo root-writable || echo root-readonly
			touch /tmp/x && echo tmp-writable; echo kept > /work/out.txt && echo work-writable
			echo "task=$HERD_TASK_ID"; ps -o pid,comm | wc -l`))
		waitTaskState(t, cl, id, api.TaskSucceeded)
		out := attemptOf(t, cl, id).OutputTail
		for _, want := range []string{"pid=1 ", "image=alpha-only", "work=/work", "host=edge-1", "host-files-hidden", "root-readonly", "tmp-writable", "work-writable", "task=" + id} {
			if !strings.Contains(out, want) {
				t.Fatalf("the container's output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("datasets in, outputs out", func(t *testing.T) {
		ts := ociSpec("thumb", refA, `cat "$HERD_INPUT_PHOTOS/cat.jpg" > /work/thumb.jpg && echo "input at $HERD_INPUT_PHOTOS"
			touch "$HERD_INPUT_PHOTOS/x" 2>/dev/null && echo input-writable || echo input-readonly`)
		ts.Inputs = []string{"photos"}
		ts.Outputs = []string{"thumb.jpg"}
		id := submit(t, cl, ts)
		waitTaskState(t, cl, id, api.TaskSucceeded)
		if out := attemptOf(t, cl, id).OutputTail; !strings.Contains(out, "input at /datasets/photos") || !strings.Contains(out, "input-readonly") {
			t.Fatalf("output %q", out)
		}
		if !Eventually(30*time.Second, func() bool {
			n, _, err := cl.GetNode(Ctx(t, time.Minute), "edge-1", api.ReadOptions{})
			for _, d := range n.Datasets {
				if err == nil && strings.HasSuffix(d.Name, "thumb.jpg") && d.Bytes == 4 {
					return true
				}
			}
			return false
		}) {
			t.Fatal("the container's output did not become a dataset of its node")
		}
	})

	t.Run("memory limit", func(t *testing.T) {
		ts := ociSpec("hog", refA, `head -c 400000000 /dev/zero | tail`)
		ts.Resources.MemoryMB = 32
		ts.MaxAttempts = ptrTo(1)
		id := submit(t, cl, ts)
		waitTaskState(t, cl, id, api.TaskFailed)
		if msg := endedWith(t, cl, id); !strings.Contains(msg, "killed: memory limit 32 MB reached") {
			t.Fatalf("the memory hog ended with %q", msg)
		}
	})

	t.Run("two images at once", func(t *testing.T) {
		a := submit(t, cl, ociSpec("a", refA, `sleep 2; test -e /alpha-only && test ! -e /beta-only && ls /work && echo clean-a`))
		b := submit(t, cl, ociSpec("b", refB, `sleep 2; test -e /beta-only && test ! -e /alpha-only && ls /work && echo clean-b`))
		waitTaskState(t, cl, a, api.TaskSucceeded)
		waitTaskState(t, cl, b, api.TaskSucceeded)
		ta, tb := attemptOf(t, cl, a), attemptOf(t, cl, b)
		if !strings.Contains(ta.OutputTail, "clean-a") || !strings.Contains(tb.OutputTail, "clean-b") {
			t.Fatalf("outputs:\n%s\n%s", ta.OutputTail, tb.OutputTail)
		}
		if !ta.StartedAt.Before(tb.FinishedAt) || !tb.StartedAt.Before(ta.FinishedAt) {
			t.Fatalf("the two containers did not run at once: %v-%v and %v-%v", ta.StartedAt, ta.FinishedAt, tb.StartedAt, tb.FinishedAt)
		}
	})

	t.Run("second run from the cache", func(t *testing.T) {
		before, err := cl.NodeImages(Ctx(t, time.Minute), "edge-1")
		if err != nil {
			t.Fatal(err)
		}
		id := submit(t, cl, ociSpec("again", refA, `echo again`))
		waitTaskState(t, cl, id, api.TaskSucceeded)
		after, err := cl.NodeImages(Ctx(t, time.Minute), "edge-1")
		if err != nil {
			t.Fatal(err)
		}
		if after.Pulls != before.Pulls || after.Hits != before.Hits+1 {
			t.Fatalf("the second run of %s pulled: pulls %d → %d, hits %d → %d", refA, before.Pulls, after.Pulls, before.Hits, after.Hits)
		}
		if after.Runtime == "" || len(after.Images) != 2 || after.UsedBytes < int64(len(bb)) {
			t.Fatalf("the cache as the node tells it: %+v", after)
		}
	})

	t.Run("image layout on disk", func(t *testing.T) {
		dir := t.TempDir()
		p, err := layout.Write(dir, empty.Index)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.AppendImage(busyboxImage(t, bb, "layout-only"), layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "v1"})); err != nil {
			t.Fatal(err)
		}
		id := submit(t, cl, ociSpec("layout", "oci-layout:"+dir+":v1", `cat /layout-only`))
		waitTaskState(t, cl, id, api.TaskSucceeded)
		if out := attemptOf(t, cl, id).OutputTail; !strings.Contains(out, "layout-only") {
			t.Fatalf("output %q", out)
		}
	})

	t.Run("pull failure", func(t *testing.T) {
		ts := ociSpec("missing", host+"/test/alpha:nope", `true`)
		ts.MaxAttempts = ptrTo(2)
		id := submit(t, cl, ts)
		waitTaskState(t, cl, id, api.TaskFailed)
		task, _, err := cl.GetTask(Ctx(t, time.Minute), id, api.ReadOptions{Consistent: true})
		if err != nil || len(task.Attempts) != 2 {
			t.Fatalf("a failing pull is retried like any failure: %d attempts (%v)", len(task.Attempts), err)
		}
		if msg := endedWith(t, cl, id); !strings.Contains(msg, "unknown image or tag") {
			t.Fatalf("the pull failed with %q", msg)
		}
	})

	t.Run("cancel kills the container", func(t *testing.T) {
		id := submit(t, cl, ociSpec("long", refA, `echo started; sleep 3600`))
		waitTaskState(t, cl, id, api.TaskRunning)
		if !Eventually(30*time.Second, func() bool { return len(sleepers(t)) > 0 }) {
			t.Fatal("the container's sleep never showed up among the host's processes")
		}
		if _, err := cl.CancelTask(Ctx(t, time.Minute), id, "test"); err != nil {
			t.Fatal(err)
		}
		waitTaskState(t, cl, id, api.TaskCancelled)
		if !Eventually(30*time.Second, func() bool { return len(sleepers(t)) == 0 && len(h.Agent.Running()) == 0 }) {
			t.Fatalf("the cancelled container's processes live on: %v", sleepers(t))
		}
	})

	t.Run("no network", func(t *testing.T) {
		ts := ociSpec("offline", refA, `ls /sys/class/net`)
		ts.Network = spec.NetworkNone
		id := submit(t, cl, ts)
		waitTaskState(t, cl, id, api.TaskSucceeded)
		if out := strings.Fields(attemptOf(t, cl, id).OutputTail); fmt.Sprint(out) != "[lo]" {
			t.Fatalf("interfaces without a network: %v", out)
		}
	})

	// The path from a `docker save` to a running task with no registry:
	// the names it gives (Docker Hub's, unreachable from here) and the
	// pinned reference the import answers are found in the node's cache.
	t.Run("imported archive", func(t *testing.T) {
		archive := t.TempDir() + "/saved.tar"
		tag, err := name.NewTag("site/imported:1")
		if err != nil {
			t.Fatal(err)
		}
		if err := tarball.WriteToFile(archive, tag, busyboxImage(t, bb, "imported-only")); err != nil {
			t.Fatal(err)
		}
		load, err := cl.ImportImage(Ctx(t, time.Minute), "edge-1", func() (io.ReadCloser, error) { return os.Open(archive) }, nil)
		if err != nil || len(load.Images) != 1 {
			t.Fatalf("import: %+v, %v", load, err)
		}
		for _, ref := range []string{"site/imported:1", load.Images[0].Pinned} {
			id := submit(t, cl, ociSpec("imported", ref, `cat /imported-only`))
			waitTaskState(t, cl, id, api.TaskSucceeded)
			if out := attemptOf(t, cl, id).OutputTail; !strings.Contains(out, "imported-only") {
				t.Fatalf("%s: output %q", ref, out)
			}
		}
	})
}

// A node without a container runtime does not advertise oci@1: an oci
// task waits, and its explanation says why; the node's status says why
// it has no runtime.
func TestOCITaskWaitsForANodeWithARuntime(t *testing.T) {
	c := NewClusterWith(t, 3, gossipSetup())
	h := c.StartAgent(agent.Config{ID: "edge-1", Slots: 1, OCIRuntime: "none"})
	WaitRegistered(t, h)
	cl := c.AllClient()
	ctx := Ctx(t, time.Minute)
	node, _, err := cl.GetNode(ctx, "edge-1", api.ReadOptions{Consistent: true})
	if err != nil || len(node.Capabilities["oci"]) != 0 {
		t.Fatalf("a node without a runtime advertises %v (%v)", node.Capabilities, err)
	}
	ts := shSpec("boxed", "true")
	ts.Image = "registry.invalid/none:1"
	id := submit(t, cl, ts)
	var ex api.Explanation
	if !Eventually(30*time.Second, func() bool {
		ex, err = cl.ExplainTask(ctx, id, api.ReadOptions{})
		return err == nil && strings.Contains(ex.Summary, "missing capability oci@1")
	}) {
		t.Fatalf("the explanation of an oci task with no runtime anywhere: %+v (%v)", ex, err)
	}
	ic, err := cl.NodeImages(ctx, "edge-1")
	if err != nil || ic.Runtime != "" || !strings.Contains(ic.RuntimeProblem, "disabled") {
		t.Fatalf("the node's runtime: %+v (%v)", ic, err)
	}
}
