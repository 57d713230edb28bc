//go:build linux

package test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// secureSectionBlocks are the shell blocks of docs/security.md before
// its systemd steps, in order.
func secureSectionBlocks(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "# Secure deployment\n")
	end := strings.Index(readme, "\n## With systemd, step by step\n")
	if start < 0 || end < start {
		t.Fatal("docs/security.md has no Secure deployment page followed by the systemd steps")
	}
	var blocks []string
	for _, part := range strings.Split(readme[start:end], "```sh\n")[1:] {
		block, _, ok := strings.Cut(part, "```")
		if !ok {
			t.Fatal("an unterminated sh block in docs/security.md")
		}
		blocks = append(blocks, block)
	}
	return blocks
}

// waitComment turns a line that says `# wait for "TEXT"` into a loop that
// waits until the command prints TEXT.
var waitComment = regexp.MustCompile(`^(.*?)\s*#\s*wait for "([^"]+)"\s*$`)

// onLoopback moves the page's commands onto this machine: its site
// addresses (10.0.0.x) to the same hosts in net (a /24 of 127/8, which
// is all loopback on Linux), and its system directories into dir.
func onLoopback(block, dir, net string) string {
	block = strings.ReplaceAll(block, "10.0.0.", net)
	block = strings.ReplaceAll(block, "/etc/herd/", dir+"/etc/herd/")
	block = strings.ReplaceAll(block, "/var/lib/herd-agent", dir+"/var/herd-agent")
	var out []string
	for _, line := range strings.Split(block, "\n") {
		if m := waitComment.FindStringSubmatch(line); m != nil {
			line = fmt.Sprintf("until %s | grep -q %q; do sleep 0.5; done", m[1], m[2])
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// docs/security.md's set-up, run as written, in order, on loopback
// addresses in a temporary directory (the only changes: the site's
// addresses become 127.0.0.x, the system directories the test's, the
// three servers run in the background, `<secret>` is the secret the
// bootstrap printed, and the waits the prose asks for are loops): three
// servers with TLS and ACLs, an agent with its certificate, a task run
// with -wait and its logs read back through the servers, and the gossip
// key rotated. The section cannot drift from what works.
func TestProcessesSecureDeploymentPageRuns(t *testing.T) {
	bin := buildHerd(t)
	blocks := secureSectionBlocks(t)
	if len(blocks) != 6 {
		t.Fatalf("the Secure deployment section has %d sh blocks; this test runs 6 (certificates, gossip key, a server, tokens, an agent, key rotation)", len(blocks))
	}
	certs, keygen, server, tokens, agentBlock, rotation := blocks[0], blocks[1], blocks[2], blocks[3], blocks[4], blocks[5]
	dir := t.TempDir()
	// A /24 of loopback of this run's own: the page's fixed ports are
	// then free whatever else runs (another run, one a killed test left).
	net := fmt.Sprintf("127.%d.%d.", 1+rand.IntN(254), 1+rand.IntN(254))
	var sb strings.Builder
	// Everything the script starts is in its process group, killed with
	// it: on a TERM (the test's process gone, or the time up) and at the
	// end of the test.
	fmt.Fprintf(&sb, "set -euo pipefail\ntrap 'kill -KILL 0' TERM\nexport PATH=%s:$PATH\ncd %s\nmkdir -p etc/herd var\n", filepath.Dir(bin), dir)
	sb.WriteString(onLoopback(certs, dir, net) + "\n")
	sb.WriteString(onLoopback(keygen, dir, net) + "\n")
	// "Copy pki/ca.pem everywhere, and to each machine its own files."
	sb.WriteString("cp pki/ca.pem pki/s1.pem pki/s1-key.pem pki/s2.pem pki/s2-key.pem pki/s3.pem pki/s3-key.pem pki/edge-7.pem pki/edge-7-key.pem etc/herd/\n")
	// "On each mini PC": the block names s1; s2 and s3 run it with their
	// own id, files and addresses (the join list stays).
	for n := 1; n <= 3; n++ {
		var lines []string
		for _, line := range strings.Split(server, "\n") {
			if !strings.Contains(line, "-join") {
				line = strings.ReplaceAll(line, "10.0.0.11:", fmt.Sprintf("10.0.0.1%d:", n))
			}
			line = strings.ReplaceAll(line, "-id s1", fmt.Sprintf("-id s%d", n))
			line = strings.ReplaceAll(line, "/s1.pem", fmt.Sprintf("/s%d.pem", n))
			line = strings.ReplaceAll(line, "/s1-key.pem", fmt.Sprintf("/s%d-key.pem", n))
			line = strings.ReplaceAll(line, "/var/lib/herd ", fmt.Sprintf("%s/var/s%d ", dir, n))
			lines = append(lines, line)
		}
		fmt.Fprintf(&sb, "( %s ) > s%d.log 2>&1 &\n", onLoopback(strings.TrimSpace(strings.Join(lines, "\n")), dir, net), n)
	}
	// "Once the three have a leader": the bootstrap is tried until one
	// answers; its secret is the <secret> of the next line.
	var tokenLines []string
	for _, line := range strings.Split(onLoopback(tokens, dir, net), "\n") {
		switch {
		case strings.HasPrefix(strings.TrimSpace(line), "herd acl bootstrap"):
			line = "for i in $(seq 120); do herd acl bootstrap > boot.txt 2> boot.err && break; sleep 0.5; done; cat boot.txt"
		case strings.Contains(line, "<secret>"):
			line = strings.ReplaceAll(line, "<secret>", `$(awk '/Secret ID/{print $3}' boot.txt)`)
		}
		tokenLines = append(tokenLines, line)
	}
	sb.WriteString(strings.Join(tokenLines, "\n") + "\n")
	fmt.Fprintf(&sb, "( %s ) > edge-7.log 2>&1 &\n", onLoopback(strings.TrimSpace(agentBlock), dir, net))
	// The systemd steps' first task, and its logs through the servers.
	sb.WriteString(`until herd node list | grep -q 'edge-7.*READY'; do sleep 0.5; done
herd task submit -wait -- sh -c 'echo hello from $HERD_NODE_ID' 2> task.txt | tee out.txt
id=$(sed -n 's/^Submitted task \([^,]*\),.*/\1/p' task.txt)
herd task logs "$id" > logs.txt
`)
	sb.WriteString("echo \"mark: rotation starts $(date +%s.%N)\"\n")
	sb.WriteString(onLoopback(rotation, dir, net) + "\n")
	sb.WriteString("echo \"mark: rotation done $(date +%s.%N)\"\n")
	out := runDocScript(t, dir, sb.String(), 4*time.Minute, "s1.log", "s2.log", "s3.log", "edge-7.log", "boot.err")
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "mark: ") {
			t.Log(line)
		}
	}
	// -wait leaves the task's output on standard output, herd's words on
	// standard error.
	if out, err := os.ReadFile(filepath.Join(dir, "out.txt")); err != nil || strings.TrimSpace(string(out)) != "hello from edge-7" {
		t.Fatalf("submit -wait's standard output: %q, %v", out, err)
	}
	logs, err := os.ReadFile(filepath.Join(dir, "logs.txt"))
	if err != nil || !strings.Contains(string(logs), "hello from edge-7") {
		t.Fatalf("the task's logs through the servers: %q (%v)\n--- output ---\n%s", logs, err, tail(out, 4000))
	}
}
