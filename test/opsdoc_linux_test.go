//go:build linux

package test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// docBlocks are the sh blocks of a docs page, in order.
func docBlocks(t *testing.T, page string) []string {
	t.Helper()
	b, err := os.ReadFile("../docs/" + page)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, part := range strings.Split(string(b), "```sh\n")[1:] {
		block, _, ok := strings.Cut(part, "```")
		if !ok {
			t.Fatalf("an unterminated sh block in docs/%s", page)
		}
		blocks = append(blocks, block)
	}
	return blocks
}

// The open deployment the docs describe, run as written on loopback: the
// three servers of docs/operations.md (A, B and C become three addresses
// of a loopback /24 of the test's own, each server its id and directory),
// the agent of docs/agents.md (the site's 10.1.0.1x the same addresses),
// and the job commands of docs/pipelines.md against them, with
// examples/pipeline.hcl as its pipeline.hcl (the page's own is a sketch
// with placeholder commands) and ID the job's id; the cancel is of a
// second run, made without -wait, while it runs.
func TestProcessesOperationsPagesRun(t *testing.T) {
	bin := buildHerd(t)
	servers, agents, jobs := docBlocks(t, "operations.md"), docBlocks(t, "agents.md"), docBlocks(t, "pipelines.md")
	if len(servers) != 1 || len(agents) != 1 || len(jobs) != 1 {
		t.Fatalf("this test runs one block of each page: operations.md %d, agents.md %d, pipelines.md %d", len(servers), len(agents), len(jobs))
	}
	dir := t.TempDir()
	net := fmt.Sprintf("127.%d.%d.", 1+rand.IntN(254), 1+rand.IntN(254))
	pipeline, err := os.ReadFile("../examples/pipeline.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pipeline.hcl"), pipeline, 0o600); err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "set -euo pipefail\ntrap 'kill -KILL 0' TERM\nexport PATH=%s:$PATH HERD_ADDR=%s1:4646\ncd %s\n", filepath.Dir(bin), net, dir)
	for n := 1; n <= 3; n++ {
		block := strings.TrimSpace(servers[0])
		block = strings.ReplaceAll(block, "-id s1", fmt.Sprintf("-id s%d", n))
		block = strings.ReplaceAll(block, "/var/lib/herd ", fmt.Sprintf("%s/s%d ", dir, n))
		var lines []string
		for _, line := range strings.Split(block, "\n") {
			if !strings.Contains(line, "-join") {
				line = strings.ReplaceAll(line, "A:", fmt.Sprintf("%s%d:", net, n))
			}
			line = strings.NewReplacer("A:", net+"1:", "B:", net+"2:", "C:", net+"3:").Replace(line)
			lines = append(lines, line)
		}
		fmt.Fprintf(&sb, "( %s ) > s%d.log 2>&1 &\n", strings.Join(lines, "\n"), n)
	}
	sb.WriteString("until herd node list > /dev/null 2>&1; do sleep 0.5; done\n")
	agent := strings.NewReplacer("10.1.0.1", net, "/var/lib/herd-agent", dir+"/agent").Replace(strings.TrimSpace(agents[0]))
	fmt.Fprintf(&sb, "( %s ) > agent.log 2>&1 &\n", agent)
	sb.WriteString("until herd node list | grep -q 'edge-1.*READY'; do sleep 0.5; done\n")
	var id string
	for _, line := range strings.Split(jobs[0], "\n") {
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		switch {
		case line == "":
			continue
		case strings.HasSuffix(line, "-wait"):
			fmt.Fprintf(&sb, "%s > run.txt\nid=$(herd job list -o name | head -1)\n", line)
			id = "$id"
		case strings.HasPrefix(line, "herd job cancel ID"):
			sb.WriteString("second=$(herd job run pipeline.hcl -o name)\n")
			sb.WriteString(strings.Replace(line, "ID", "$second", 1) + " > cancel.txt\n")
			sb.WriteString("herd job status \"$second\" > cancelled.txt\n")
		default:
			fmt.Fprintf(&sb, "%s > %s.txt\n", strings.ReplaceAll(line, "ID", id), strings.ReplaceAll(strings.Fields(line)[2], " ", ""))
		}
	}
	runDocScript(t, dir, sb.String(), 4*time.Minute, "s1.log", "s2.log", "s3.log", "agent.log")
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for file, want := range map[string]string{
		"run.txt":       "SUCCEEDED",
		"status.txt":    "SUCCEEDED",
		"list.txt":      "SUCCEEDED",
		"cancelled.txt": "CANCELLED",
	} {
		if got := read(file); !strings.Contains(got, want) {
			t.Errorf("%s lacks %s:\n%s", file, want, got)
		}
	}
}
