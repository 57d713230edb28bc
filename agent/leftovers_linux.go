package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// killLeftovers kills the processes an earlier run of this agent left
// running and returns how many it found of each attempt. An agent killed
// outright (SIGKILL, a crash) stops nothing: its tasks run on unless a
// cgroup held them, and one left running beside the run the cluster
// places once it hears of the loss would make two runs at once.
//
// A process is this agent's when its environment names this node
// (HERD_NODE_ID, which the agent gives every attempt with HERD_ATTEMPT_ID)
// and either its attempt is one the cluster lists as running here or it
// still works under this agent's work directory: another agent on the
// machine may carry the same node id (a test's, a misconfigured one), and
// its attempts are neither. Each one's process group is killed with it,
// which takes the children that stayed in the group. It reads /proc once,
// when the agent starts, before it has started anything itself.
func killLeftovers(nodeID, workRoot string, listed map[string]bool) map[string]int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	node := []byte("HERD_NODE_ID=" + nodeID)
	root := filepath.Clean(workRoot) + string(filepath.Separator)
	self, group := os.Getpid(), syscall.Getpgrp()
	found := map[string]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		attempt, ok := envOf(env, node, "HERD_ATTEMPT_ID=")
		if !ok {
			continue
		}
		if !listed[attempt] {
			cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd")
			if err != nil || !strings.HasPrefix(cwd+string(filepath.Separator), root) {
				continue
			}
		}
		found[attempt]++
		if pgid, err := syscall.Getpgid(pid); err == nil && pgid != group {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return found
}

// envOf returns the value of the variable named by prefix (NAME=) in a
// NUL-separated environment that also holds the exact entry must.
func envOf(env, must []byte, prefix string) (string, bool) {
	var value []byte
	matched, has := false, false
	for len(env) > 0 {
		var v []byte
		v, env, _ = bytes.Cut(env, []byte{0})
		switch {
		case bytes.Equal(v, must):
			matched = true
		case bytes.HasPrefix(v, []byte(prefix)):
			value, has = v[len(prefix):], true
		}
	}
	return string(value), matched && has
}
