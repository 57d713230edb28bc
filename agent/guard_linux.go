package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

const guardSupported = true

// monoNow reads CLOCK_MONOTONIC, the clock the agent and its guard share
// (Go's own timers run on it too): it never steps with the wall clock.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}

// scanGuarded finds the processes of the agent's attempts: those whose
// environment names the node and an attempt and either the agent's lease
// socket or a working directory under its work root, and every process
// in the agent's own cgroups that does not name another node (a process
// may clear its environment; its cgroup still holds it). It reads /proc
// once per call.
func scanGuarded(cfg guardConfig) []guardTarget {
	var out []guardTarget
	// Neither the agent nor this guard is ever a target.
	seen := map[int]bool{os.Getpid(): true}
	if cfg.AgentPID > 0 {
		seen[cfg.AgentPID] = true
	}
	node := []byte("HERD_NODE_ID=" + cfg.Node)
	var addr []byte
	if cfg.AgentAddr != "" {
		addr = []byte("HERD_AGENT_ADDR=" + cfg.AgentAddr)
	}
	root := filepath.Clean(cfg.WorkRoot) + string(filepath.Separator)
	if entries, err := os.ReadDir("/proc"); err == nil {
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
			if err != nil {
				continue
			}
			attempt, ok := envOf(env, node, "HERD_ATTEMPT_ID=")
			if !ok || seen[pid] {
				continue
			}
			if addr == nil || !hasEnvEntry(env, addr) {
				cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd")
				if err != nil || cfg.WorkRoot == "" || !strings.HasPrefix(cwd+string(filepath.Separator), root) {
					continue
				}
			}
			seen[pid] = true
			out = append(out, guardTarget{pid: pid, pgid: pgidOf(pid), attempt: attempt})
		}
	}
	for _, cg := range cfg.Cgroups {
		groups, err := os.ReadDir(cg.Dir)
		if err != nil {
			continue
		}
		for _, grp := range groups {
			if !grp.IsDir() || !strings.HasPrefix(grp.Name(), cg.Prefix) {
				continue
			}
			procs, err := os.ReadFile(filepath.Join(cg.Dir, grp.Name(), "cgroup.procs"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(procs)) {
				pid, err := strconv.Atoi(f)
				if err != nil || seen[pid] {
					continue
				}
				seen[pid] = true
				attempt := ""
				if env, err := os.ReadFile("/proc/" + f + "/environ"); err == nil {
					if other, ok := envValue(env, "HERD_NODE_ID="); ok && other != cfg.Node {
						continue
					}
					attempt, _ = envValue(env, "HERD_ATTEMPT_ID=")
				}
				out = append(out, guardTarget{pid: pid, pgid: pgidOf(pid), attempt: attempt})
			}
		}
	}
	return out
}

func pgidOf(pid int) int {
	pgid, err := syscall.Getpgid(pid)
	if err != nil {
		return 0
	}
	return pgid
}

// hasEnvEntry reports whether the NUL-separated environment holds the
// exact entry.
func hasEnvEntry(env, entry []byte) bool {
	for len(env) > 0 {
		var v []byte
		v, env, _ = bytes.Cut(env, []byte{0})
		if bytes.Equal(v, entry) {
			return true
		}
	}
	return false
}

// envValue is the value of the variable named by prefix (NAME=).
func envValue(env []byte, prefix string) (string, bool) {
	for len(env) > 0 {
		var v []byte
		v, env, _ = bytes.Cut(env, []byte{0})
		if bytes.HasPrefix(v, []byte(prefix)) {
			return string(v[len(prefix):]), true
		}
	}
	return "", false
}
