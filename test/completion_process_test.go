package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"herd/api"
)

// The completion scripts, loaded into a real shell, offer commands,
// subcommands, flags (before and after arguments) and the cluster's
// live ids.
func TestProcessesShellCompletion(t *testing.T) {
	bin := buildHerd(t)
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	c := NewCluster(t, 1)
	cl := c.AllClient()
	if _, err := cl.RegisterNode(Ctx(t, 10*time.Second), api.NodeRegistration{NodeSpec: api.NodeSpec{
		ID: "edge-7", Capabilities: map[string][]string{"exec": {"1"}}, Resources: api.Resources{CPUMillis: 1000}, Slots: 1,
	}}); err != nil {
		t.Fatal(err)
	}
	task, _, err := cl.SubmitTask(Ctx(t, 10*time.Second), api.TaskSpec{Command: []string{"true"}, Resources: api.Resources{GPU: 9}})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(bin)
	complete := func(words ...string) []string {
		t.Helper()
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + w + "'"
		}
		script := `source <(herd completion bash)
COMP_WORDS=(` + strings.Join(quoted, " ") + `)
COMP_CWORD=` + strconv.Itoa(len(words)-1) + `
_herd
printf '%s\n' "${COMPREPLY[@]}"`
		cmd := exec.Command(bash, "-c", script)
		cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"), "HERD_ADDR="+c.Replicas[0].Cfg.HTTPAddr)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.Fields(string(out))
	}
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"herd", "ta"}, "task"},
		{[]string{"herd", "task", "st"}, "status"},
		{[]string{"herd", "operator", "raft", "tr"}, "transfer-leadership"},
		{[]string{"herd", "task", "list", "-o", "name", "--st"}, "--stale"},
		{[]string{"herd", "task", "status", task.ID, "-j"}, "-json"},
		{[]string{"herd", "node", "status", "edge"}, "edge-7"},
		{[]string{"herd", "task", "cancel", ""}, task.ID},
	} {
		if got := complete(c.words...); !slices.Contains(got, c.want) {
			t.Errorf("completing %q: %q, want %q among them", c.words, got, c.want)
		}
	}
	if got := complete("herd", "task", "st"); slices.Contains(got, "submit") {
		t.Errorf("candidates must start with the word typed: %q", got)
	}

	// The zsh and fish scripts, in their own shells: zsh's completion
	// system stands in as compadd printing what it is given; fish lists
	// what it would complete a command line with.
	env := append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"), "HERD_ADDR="+c.Replicas[0].Cfg.HTTPAddr)
	shells := []struct {
		shell, script string
	}{
		{"zsh", `compdef() { : }
compadd() { if [[ $1 == -a ]]; then print -l ${(P)2}; fi }
source <(herd completion zsh)
words=(herd node status edge); CURRENT=4; _herd
words=(herd task st); CURRENT=3; _herd`},
		{"fish", `herd completion fish | source
complete -C"herd node status edge"
complete -C"herd task st"`},
	}
	for _, sh := range shells {
		path, err := exec.LookPath(sh.shell)
		if err != nil {
			t.Logf("%s is not installed: its completion script is not tried", sh.shell)
			continue
		}
		cmd := exec.Command(path, "-c", sh.script)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		got := strings.Fields(string(out))
		if err != nil || !slices.Contains(got, "edge-7") || !slices.Contains(got, "status") || slices.Contains(got, "submit") {
			t.Errorf("%s completion: %v, %q", sh.shell, err, out)
		}
	}
}
