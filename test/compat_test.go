package test

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"herd/agent"
	"herd/api"
	"herd/config"
	"herd/internal/version"
	"herd/test/localcluster"
)

// updateCompat writes this build's data directory into testdata/compat
// (go test ./test -run TestStoredDataDirectories -update-compat): done
// for each release, so that every later build is tested against what it
// wrote.
var updateCompat = flag.Bool("update-compat", false, "write this build's data directory into test/testdata/compat")

// compatManifest is what a stored data directory holds, as the build that
// wrote it saw it.
type compatManifest struct {
	Version  string         `json:"version"`
	LogStore string         `json:"log_store"`
	Tasks    map[string]int `json:"tasks"` // by state
	Jobs     map[string]int `json:"jobs"`  // by state
	Nodes    []string       `json:"nodes"`
}

// Every stored data directory of an earlier build (log, snapshot, stable
// store and data-format file, with tasks in every end state, attempts,
// a pipeline, a periodic job and a node) boots in this build, holds what
// its build saw, passes the invariant check and takes new work: version
// N reads what N−1 wrote.
func TestStoredDataDirectories(t *testing.T) {
	if *updateCompat {
		for _, store := range []string{config.LogStoreBoltDB, config.LogStoreWAL} {
			writeCompatDataDir(t, store)
		}
	}
	archives, _ := filepath.Glob(filepath.Join("testdata", "compat", "*.tar.gz"))
	if len(archives) == 0 {
		t.Fatal("no stored data directory under test/testdata/compat")
	}
	for _, archive := range archives {
		t.Run(filepath.Base(archive), func(t *testing.T) {
			dir := t.TempDir()
			if err := untar(archive, dir); err != nil {
				t.Fatal(err)
			}
			var want compatManifest
			b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
			if err != nil || json.Unmarshal(b, &want) != nil {
				t.Fatalf("manifest: %v", err)
			}
			c, err := localcluster.StartLoopback(dir, "compat", 1, localcluster.Options{Logger: TestLogger(),
				Configure: func(cfg *config.Server) { cfg.Raft.LogStore = want.LogStore }})
			if err != nil {
				t.Fatalf("the data directory of %s (log store %s) does not boot: %v", want.Version, want.LogStore, err)
			}
			defer c.Shutdown()
			cl, err := api.NewClient(c.HTTPAddrs()[0])
			if err != nil {
				t.Fatal(err)
			}
			got := readCompatState(t, cl)
			if fmt.Sprint(got.Tasks) != fmt.Sprint(want.Tasks) || fmt.Sprint(got.Jobs) != fmt.Sprint(want.Jobs) || fmt.Sprint(got.Nodes) != fmt.Sprint(want.Nodes) {
				t.Fatalf("the state %s wrote: %+v\nread by %s: %+v", want.Version, want, version.Version(), got)
			}
			if check := c.Servers()[0].CheckState(); !check.OK {
				t.Fatalf("invariants: %+v", check)
			}
			if _, _, err := cl.SubmitTask(Ctx(t, 10*time.Second), api.TaskSpec{Command: []string{"true"}}); err != nil {
				t.Fatalf("a new task on the old data: %v", err)
			}
		})
	}
}

// writeCompatDataDir runs a one-replica cluster with an agent through
// tasks that succeed, fail and are cancelled, a pipeline and a periodic
// job, snapshots it, adds more, and stores the data directory with what
// it holds.
func writeCompatDataDir(t *testing.T, store string) {
	dir := t.TempDir()
	c, err := localcluster.StartLoopback(dir, "compat", 1, localcluster.Options{Logger: TestLogger(),
		Configure: func(cfg *config.Server) { cfg.Raft.LogStore = store }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartAgent(agent.Config{ID: "edge-1", Slots: 4, DataDir: filepath.Join(t.TempDir(), "agent"), NoBench: true, Servers: c.HTTPAddrs()}); err != nil {
		t.Fatal(err)
	}
	cl, err := api.NewClient(c.HTTPAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	ctx := Ctx(t, time.Minute)
	one := 1
	var ids []string
	for i, cmd := range []string{"true", "exit 3", "sleep 600"} {
		task, _, err := cl.SubmitTask(ctx, api.TaskSpec{Name: fmt.Sprint("t", i), Command: []string{"sh", "-c", cmd}, MaxAttempts: &one})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, task.ID)
	}
	pipeline := api.JobSpec{Name: "pipe", Stages: []api.StageSpec{
		{Name: "a", Outputs: []string{"x"}, Task: api.TaskSpec{Command: []string{"sh", "-c", "echo 1 > x"}}},
		{Name: "b", DependsOn: []string{"a"}, Inputs: []string{"a.x"}, Task: api.TaskSpec{Command: []string{"sh", "-c", "cat $HERD_INPUTS/a/x"}}},
	}}
	if _, err := cl.SubmitJob(ctx, pipeline); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.SubmitJob(ctx, api.JobSpec{Name: "tick", Schedule: &api.Schedule{Cron: "@every 1h"}, Stages: []api.StageSpec{{Name: "s", Task: api.TaskSpec{Command: []string{"true"}}}}}); err != nil {
		t.Fatal(err)
	}
	if !Eventually(time.Minute, func() bool {
		t0, _, _ := cl.GetTask(ctx, ids[0], api.ReadOptions{})
		t1, _, _ := cl.GetTask(ctx, ids[1], api.ReadOptions{})
		t2, _, _ := cl.GetTask(ctx, ids[2], api.ReadOptions{})
		jobs, _, _ := cl.ListJobs(ctx, "", 10, api.ReadOptions{})
		pipeDone := false
		for _, j := range jobs.Jobs {
			pipeDone = pipeDone || (j.Name == "pipe" && j.State == api.JobSucceeded)
		}
		return t0.State == api.TaskSucceeded && t1.State == api.TaskFailed && t2.State == api.TaskRunning && pipeDone
	}) {
		t.Fatal("the tasks did not reach their states")
	}
	if _, err := cl.CancelTask(ctx, ids[2], "compat"); err != nil {
		t.Fatal(err)
	}
	if err := c.Servers()[0].Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // after the snapshot: entries of the log only
		if _, _, err := cl.SubmitTask(ctx, api.TaskSpec{Name: fmt.Sprint("after", i), Command: []string{"true"}, Resources: api.Resources{GPU: 64}}); err != nil {
			t.Fatal(err)
		}
	}
	m := readCompatState(t, cl)
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	m.Version, m.LogStore = version.Version(), store
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join("testdata", "compat", version.Version()+"-"+store+".tar.gz")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := tarDir(dir, out); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s: %+v", out, m)
}

func readCompatState(t *testing.T, cl *api.Client) compatManifest {
	t.Helper()
	ctx := Ctx(t, 30*time.Second)
	m := compatManifest{Tasks: map[string]int{}, Jobs: map[string]int{}}
	tasks, _, err := cl.ListTasks(ctx, api.TaskQuery{Limit: 1000}, api.ReadOptions{Consistent: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks.Tasks {
		m.Tasks[task.State]++
	}
	jobs, _, err := cl.ListJobs(ctx, "", 100, api.ReadOptions{Consistent: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Jobs {
		m.Jobs[j.State]++
	}
	nodes, _, err := cl.ListNodes(ctx, api.ReadOptions{Consistent: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		m.Nodes = append(m.Nodes, n.ID)
	}
	sort.Strings(m.Nodes)
	return m
}

func tarDir(dir, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name, hdr.ModTime = filepath.ToSlash(rel), time.Unix(0, 0)
		if strings.HasSuffix(rel, ".lock") {
			return nil
		}
		if err := tw.WriteHeader(hdr); err != nil || d.IsDir() {
			return err
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		path := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if !strings.HasPrefix(path, filepath.Clean(dir)+string(os.PathSeparator)) {
			return fmt.Errorf("%s: %q leaves the directory", archive, hdr.Name)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			w, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(hdr.Mode)&0o777)
			if err != nil {
				return err
			}
			if _, err := io.Copy(w, tr); err != nil {
				w.Close()
				return err
			}
			if err := w.Close(); err != nil {
				return err
			}
		}
	}
}
