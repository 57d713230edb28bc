package test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeShellLines are the command lines of the README's sh blocks under
// heading, in order (comments and blank lines dropped).
func readmeShellLines(t *testing.T, heading string) []string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("the README has no %q", heading)
	}
	text = text[start+len(heading)+2:]
	if end := strings.Index(text, "\n## "); end >= 0 {
		text = text[:end]
	}
	var lines []string
	for _, part := range strings.Split(text, "```sh\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		for _, line := range strings.Split(block, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			lines = append(lines, line)
		}
	}
	return lines
}

// A newcomer follows the README: herd dev, then every command of the
// set-up and of the five-minute tour, in order, as written (with the
// built binary for "go run ./cmd/herd" and "herd", from the repository's
// root); each must succeed. herd monitor, which follows events until
// interrupted, runs for two seconds.
func TestProcessesNewcomerFollowsTheREADME(t *testing.T) {
	bin := buildHerd(t)
	setup := readmeShellLines(t, "## Set up")
	tour := readmeShellLines(t, "## A five-minute tour")
	if len(setup) < 3 || setup[0] != "go run ./cmd/herd dev" || !slices.Contains(setup, "go test ./...") || len(tour) < 5 {
		t.Fatalf("the README's set-up and tour are not what this test follows:\n%q\n%q", setup, tour)
	}
	dev := exec.Command(bin, "dev", "-agents", "5", "-data-dir", t.TempDir())
	dev.Dir = ".."
	dev.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := dev.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	dev.Stderr = os.Stderr
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dev.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- dev.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-dev.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	addrs := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			if m := regexp.MustCompile(`export HERD_ADDR=(\S+)`).FindStringSubmatch(sc.Text()); m != nil && !sent {
				addrs <- m[1]
				sent = true
			}
		}
	}()
	var addr string
	select {
	case addr = <-addrs:
	case <-time.After(2 * time.Minute):
		t.Fatal("herd dev printed no HERD_ADDR")
	}
	// go test ./... is the suite itself; the rest runs.
	var lines []string
	for _, l := range append(setup[1:], tour...) {
		if l != "go test ./..." && !strings.HasPrefix(l, "export HERD_ADDR=") {
			lines = append(lines, l)
		}
	}
	root, _ := filepath.Abs("..")
	for _, line := range lines {
		line = strings.ReplaceAll(line, "go run ./cmd/herd", "herd")
		if i := strings.Index(line, "  #"); i > 0 {
			line = strings.TrimSpace(line[:i])
		}
		// "ID" stands for a task's id: the newest task's, as a newcomer
		// would copy it from the list.
		if strings.HasSuffix(line, " ID") {
			line = strings.TrimSuffix(line, " ID") + " $(herd task list -o name | tail -1)"
		}
		if strings.HasPrefix(line, "herd monitor") {
			line = "timeout 2 " + line + "; [ $? -eq 124 ]"
		}
		cmd := exec.Command("bash", "-c", line)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"), "HERD_ADDR="+addr)
		got, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the README's %q failed: %v\n%s", line, err, got)
		}
		t.Logf("$ %s\n%s", line, tail(got, 2000))
	}
}
