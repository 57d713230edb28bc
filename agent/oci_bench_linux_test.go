package agent

import (
	"archive/tar"
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"herd/api"
	"herd/internal/cputime"
	"herd/internal/testbin"
	"herd/spec"
)

// BenchmarkOCIStart measures an attempt of "true" in a container from a
// cached image, end to end as the agent runs it (bundle, runtime run,
// kill, state and delete), beside BenchmarkRunProcess's plain processes.
// The first run, which pulls and unpacks, is left out: ns/op is the warm
// start. It needs root, an OCI runtime that works here and a static
// busybox for the image.
func BenchmarkOCIStart(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("containers need root")
	}
	bb := testbin.StaticBusybox()
	if bb == nil {
		b.Skip("no static busybox (Debian: busybox-static)")
	}
	a := agentForTest(b, "none", func() (limiter, error) { return noLimits{}, nil })
	if err := a.setUpContainers(); err != nil {
		b.Fatal(err)
	}
	if a.oci == nil {
		b.Skipf("no container runtime here: %s", a.ociProblem)
	}
	dir := layoutWith(b, map[string]v1.Image{"v1": imageOf(b, layerOf(b, entry{Name: "bin/", Type: tar.TypeDir},
		entry{Name: "bin/busybox", Body: string(bb), Mode: 0o755}, entry{Name: "bin/true", Type: tar.TypeSymlink, Link: "busybox"}))})
	as := api.Assignment{
		Attempt: api.Attempt{TaskID: "01kbtask", Number: 1},
		Spec:    api.TaskSpec{Command: []string{"/bin/true"}, Driver: spec.DriverOCI, Image: "oci-layout:" + dir, Resources: api.Resources{CPUMillis: 500, MemoryMB: 64}},
	}
	run := func(i int) {
		as.Attempt.ID = "01kbattempt" + strconv.Itoa(i)
		if out := a.runProcess(context.Background(), as); out.state != "SUCCEEDED" {
			b.Fatalf("attempt %d: %+v", i, out)
		}
	}
	start := time.Now()
	run(0)
	first := time.Since(start)
	i := 0
	cpu0 := cputime.Self()
	for b.Loop() {
		i++
		run(i)
	}
	b.ReportMetric(float64((cputime.Self()-cpu0).Nanoseconds())/float64(b.N), "agent-cpu-ns/op")
	b.ReportMetric(float64(first.Milliseconds()), "first-run-ms")
}
