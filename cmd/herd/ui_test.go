package main

import (
	"fmt"
	"herd/internal/version"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"herd/agent"
	"herd/api"
	"herd/test"
)

// chromium finds a Chromium to drive, or skips the test.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium on this machine (Debian: apt-get install chromium); the dashboard's browser test needs one")
	return ""
}

// artifactDir is where tests leave files for people to look at:
// $HERD_TEST_ARTIFACTS, or the system's temporary directory.
func artifactDir(t *testing.T) string {
	dir := os.Getenv("HERD_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "herd-test-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The dashboard, served by a follower, in headless Chromium: it shows
// the three servers and the leader, a submitted task reaching SUCCEEDED,
// a node drained from the CLI as DRAINING, a task's detail with its
// output, and it follows a leader change, all without a reload.
func TestDashboardInABrowser(t *testing.T) {
	exe := chromium(t)
	c := test.NewClusterWith(t, 3, test.Setup{})
	h := c.StartAgent(agent.Config{ID: "edge-1", Slots: 2})
	test.WaitRegistered(t, h)
	follower := c.Follower()
	addr := c.Replicas[follower].Cfg.HTTPAddr
	cl := c.AllClient()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true), chromedp.WindowSize(1400, 1100))
	actx, acancel := chromedp.NewExecAllocator(test.Ctx(t, 3*time.Minute), opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	if err := chromedp.Do(bctx, chromedp.Navigate("http://"+addr+"/ui/"), chromedp.Evaluate[chromedp.Void](`window.herdMarker = 42`)); err != nil {
		t.Fatalf("open the dashboard: %v", err)
	}
	// js evaluates expr until it is true, or fails with what the page shows.
	js := func(what, expr string) {
		t.Helper()
		var last string
		if !test.Eventually(60*time.Second, func() bool {
			ok, err := chromedp.Run(bctx, chromedp.Evaluate[bool](expr))
			if err != nil {
				last = err.Error()
				return false
			}
			return ok
		}) {
			text, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("the dashboard never showed %s (%s); it shows:\n%s", what, last, text)
		}
	}
	text := func(sel string) string { // an element's text, or "" when it is not there
		return fmt.Sprintf(`((document.querySelector(%q) || {}).textContent || "")`, sel)
	}

	leader := c.Replicas[c.WaitForLeader()].Cfg.ID
	js("three servers and the leader "+leader, `document.querySelectorAll('#servers tbody tr').length === 3 && `+
		text("#leader")+` === "`+leader+`" && document.querySelector('#servers tr.leader[data-id="`+leader+`"]') !== null`)
	js("the node edge-1", text(`#nodes tr[data-id="edge-1"] td.liveness`)+` === "READY"`)
	// Every server's and agent's build, so an operator sees a skew.
	js("the servers' and the agent's version "+version.Version(), `[...document.querySelectorAll('#servers tbody td.version')].every(td => td.textContent === "`+version.Version()+`") && `+
		text(`#nodes tr[data-id="edge-1"] td.version`)+` === "`+version.Version()+`"`)

	ctx := test.Ctx(t, time.Minute)
	res, _, err := cl.SubmitTask(ctx, api.TaskSpec{Name: "browser", Command: []string{"sh", "-c", "echo shown-in-the-browser"}})
	if err != nil {
		t.Fatal(err)
	}
	js("task "+res.ID+" SUCCEEDED", text(`#tasks tr[data-id="`+res.ID+`"] td.state`)+` === "SUCCEEDED"`)
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`#tasks tr[data-id="`+res.ID+`"]`))); err != nil {
		t.Fatal(err)
	}
	js("the task's output", text("#detail-output")+`.includes("shown-in-the-browser") && `+text("#detail-attempts tbody")+`.includes("edge-1")`)

	e, out, errb := testEnv(map[string]string{"HERD_ADDR": c.Replicas[0].Cfg.HTTPAddr})
	if code := run(e, []string{"node", "drain", "edge-1"}); code != 0 {
		t.Fatalf("node drain: exit %d\n%s\n%s", code, out, errb)
	}
	js("edge-1 DRAINING", text(`#nodes tr[data-id="edge-1"] td.management`)+` === "DRAINING"`)

	// A leader change: the page shows the new leader and goes on updating.
	if _, err := cl.TransferLeadership(ctx, ""); err != nil {
		t.Fatal(err)
	}
	var now string
	if !test.Eventually(30*time.Second, func() bool {
		l, err := cl.Leader(ctx)
		now = l.ID
		return err == nil && l.ID != "" && l.ID != leader
	}) {
		t.Fatal("leadership did not move")
	}
	js("the new leader "+now, text("#leader")+` === "`+now+`"`)
	if code := run(e, []string{"node", "drain", "-disable", "edge-1"}); code != 0 {
		t.Fatalf("node drain -disable: exit %d", code)
	}
	js("edge-1 ACTIVE again", text(`#nodes tr[data-id="edge-1"] td.management`)+` === "ACTIVE"`)
	res2, _, err := cl.SubmitTask(ctx, api.TaskSpec{Name: "after-failover", Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	js("task "+res2.ID+" SUCCEEDED after the leader change", text(`#tasks tr[data-id="`+res2.ID+`"] td.state`)+` === "SUCCEEDED"`)
	// A job: its stages appear as a DAG and reach SUCCEEDED.
	job, err := cl.SubmitJob(ctx, api.JobSpec{Name: "pipe", Stages: []api.StageSpec{
		{Name: "fetch", Task: api.TaskSpec{Command: []string{"true"}}},
		{Name: "resize", DependsOn: []string{"fetch"}, Count: 2, Task: api.TaskSpec{Command: []string{"true"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	js("job "+job.ID+"'s DAG succeeded", `(() => { const j = document.querySelector('#jobs [data-job="`+job.ID+`"]');
		if (!j) return false;
		const cols = j.querySelectorAll('.column');
		return cols.length === 2 && cols[0].textContent.includes('fetch SUCCEEDED') && cols[1].textContent.includes('resize SUCCEEDED') &&
			cols[1].textContent.includes('2/2 tasks') && j.getAttribute('data-state') === 'SUCCEEDED'; })()`)
	js("no reload", `window.herdMarker === 42`)

	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(artifactDir(t), "dashboard.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(shot), "\x89PNG") {
		t.Fatalf("the screenshot is not a PNG (%d bytes)", len(shot))
	}
	t.Logf("screenshot: %s", path)
}
