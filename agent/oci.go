package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"herd/api"
	"herd/spec"
)

// ociRuntime is the OCI runtime (runc or crun) this node runs containers
// with, found working by a probe: a runtime that is installed but refuses
// to run anything here (crun on hybrid cgroups) is not used.
type ociRuntime struct {
	path    string
	name    string // "runc 1.1.5"
	root    string // the runtime's state directory, the agent's own
	cgroups cgroupLayout
}

// cgroupLayout says where a container's memory cgroup is, to read
// whether the kernel's OOM killer struck in it.
type cgroupLayout struct {
	v2     bool   // unified hierarchy (memory.events)
	memory string // the memory controller's mount (v1) or the v2 root
}

// ociCgroupParent is the cgroup under which containers are made.
const ociCgroupParent = "herd-oci"

// findRuntime returns the first of want's runtimes (auto: crun, then
// runc) that runs a probe container, or why none does.
func findRuntime(want, dataDir string) (*ociRuntime, string) {
	if want == "none" {
		return nil, "no OCI runtime: disabled (-oci-runtime none)"
	}
	if os.Geteuid() != 0 {
		return nil, "no OCI runtime: containers need the agent to run as root"
	}
	candidates := []string{"crun", "runc"}
	if want != "" && want != "auto" {
		candidates = []string{want}
	}
	layout, err := detectCgroups()
	if err != nil {
		return nil, "no OCI runtime: " + err.Error()
	}
	var why []string
	for _, c := range candidates {
		path, err := exec.LookPath(c)
		if err != nil {
			why = append(why, c+": not installed")
			continue
		}
		rt := &ociRuntime{path: path, root: filepath.Join(dataDir, "oci", "state"), cgroups: layout}
		rt.name = c + " " + runtimeVersion(path)
		if err := rt.probe(filepath.Join(dataDir, "oci", "probe")); err != nil {
			why = append(why, fmt.Sprintf("%s: %v", rt.name, err))
			continue
		}
		return rt, ""
	}
	return nil, "no working OCI runtime: " + strings.Join(why, "; ")
}

// removeLeftovers deletes the containers an earlier run of the agent left
// in the runtime's state directory, killing what still runs in them, and
// their bundles, and returns the attempts they were of. The directory is
// the agent's own and it has started nothing yet, so every container
// there is a leftover. An agent killed outright leaves its containers
// running, and their processes work in a mount namespace of their own,
// so killLeftovers cannot tell them by their working directory.
func (rt *ociRuntime) removeLeftovers(bundles string) map[string]bool {
	entries, err := os.ReadDir(rt.root)
	if err != nil {
		return nil
	}
	found := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		id := e.Name()
		_ = exec.Command(rt.path, "--root", rt.root, "delete", "-f", id).Run()
		if attempt, ok := strings.CutPrefix(id, "herd-"); ok && !strings.HasPrefix(attempt, "probe-") {
			found[attempt] = true
		}
	}
	if entries, err := os.ReadDir(bundles); err == nil {
		for _, e := range entries {
			_ = os.RemoveAll(filepath.Join(bundles, e.Name()))
		}
	}
	return found
}

func runtimeVersion(path string) string {
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return "(version unknown)"
	}
	// "runc version 1.1.5+ds1" / "crun version 1.8.1"
	first, _, _ := strings.Cut(string(out), "\n")
	if f := strings.Fields(first); len(f) >= 3 && f[1] == "version" {
		return f[2]
	}
	return strings.TrimSpace(first)
}

// detectCgroups finds the memory controller.
func detectCgroups() (cgroupLayout, error) {
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		return cgroupLayout{memory: "/sys/fs/cgroup/memory"}, nil
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && bytes.Contains(b, []byte("memory")) {
		return cgroupLayout{v2: true, memory: "/sys/fs/cgroup"}, nil
	}
	return cgroupLayout{}, errors.New("no memory cgroup controller to limit containers with")
}

// probe runs /bin/true from the host's own directories, bound read-only
// into an empty root, under a memory limit: what every container needs.
func (rt *ociRuntime) probe(dir string) error {
	_ = os.RemoveAll(dir)
	root := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var mounts []ociMount
	for _, d := range []string{"/bin", "/lib", "/lib64", "/usr", "/sbin"} {
		if fi, err := os.Lstat(d); err == nil {
			_ = os.MkdirAll(filepath.Join(root, d), 0o755)
			src := d
			if fi.Mode()&os.ModeSymlink != 0 {
				// usrmerge: /bin -> usr/bin is bound from where it leads.
				if src, err = filepath.EvalSymlinks(d); err != nil {
					continue
				}
			}
			mounts = append(mounts, ociMount{Destination: d, Type: "bind", Source: src, Options: []string{"rbind", "ro"}})
		}
	}
	id := fmt.Sprintf("herd-probe-%d", os.Getpid())
	spec := rt.spec(containerSpec{
		id: id, root: root, args: []string{"/bin/true"}, env: []string{"PATH=/usr/bin:/bin"}, cwd: "/",
		memoryMB: 64, cpuMillis: 500, extra: mounts,
	})
	if err := writeSpec(dir, spec); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, rt.path, "--root", rt.root, "run", "--bundle", dir, id)
	out, err := cmd.CombinedOutput()
	_ = exec.Command(rt.path, "--root", rt.root, "delete", "-f", id).Run()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if len(msg) > 300 {
			msg = msg[:300]
		}
		return fmt.Errorf("probe container failed (%v): %s", err, msg)
	}
	return nil
}

// containerSpec is what an attempt's container is made of.
type containerSpec struct {
	id        string
	root      string
	args, env []string
	cwd       string
	hostname  string
	memoryMB  int64
	cpuMillis int64
	noNetwork bool
	extra     []ociMount
}

// The parts of the OCI runtime spec herd writes.
type ociSpec struct {
	OCIVersion string     `json:"ociVersion"`
	Process    ociProcess `json:"process"`
	Root       ociRoot    `json:"root"`
	Hostname   string     `json:"hostname,omitempty"`
	Mounts     []ociMount `json:"mounts"`
	Linux      ociLinux   `json:"linux"`
}

type ociProcess struct {
	User            ociUser         `json:"user"`
	Args            []string        `json:"args"`
	Env             []string        `json:"env"`
	Cwd             string          `json:"cwd"`
	Capabilities    ociCapabilities `json:"capabilities"`
	NoNewPrivileges bool            `json:"noNewPrivileges"`
	Rlimits         []ociRlimit     `json:"rlimits,omitempty"`
}

type ociUser struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

type ociCapabilities struct {
	Bounding  []string `json:"bounding"`
	Effective []string `json:"effective"`
	Permitted []string `json:"permitted"`
	Ambient   []string `json:"ambient"`
}

type ociRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type ociRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type ociLinux struct {
	Namespaces    []ociNamespace `json:"namespaces"`
	Resources     ociResources   `json:"resources"`
	CgroupsPath   string         `json:"cgroupsPath"`
	MaskedPaths   []string       `json:"maskedPaths"`
	ReadonlyPaths []string       `json:"readonlyPaths"`
}

type ociNamespace struct {
	Type string `json:"type"`
}

type ociResources struct {
	Memory *ociMemory `json:"memory,omitempty"`
	CPU    *ociCPU    `json:"cpu,omitempty"`
	Pids   *ociPids   `json:"pids,omitempty"`
}

type ociMemory struct {
	Limit int64 `json:"limit"`
	Swap  int64 `json:"swap"`
}

type ociCPU struct {
	Quota  int64  `json:"quota"`
	Period uint64 `json:"period"`
}

type ociPids struct {
	Limit int64 `json:"limit"`
}

// The capabilities a task keeps: those Docker and runc's default spec
// give a container, less the ones that change the host's files' owners
// and devices.
var containerCaps = []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE", "CAP_CHOWN", "CAP_DAC_OVERRIDE",
	"CAP_FOWNER", "CAP_FSETID", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_SYS_CHROOT"}

// spec is the runtime spec of a container: new PID, mount, IPC and UTS
// namespaces (and network, with noNetwork), the root read-only, /tmp a
// fresh tmpfs, the limits as cgroup settings.
func (rt *ociRuntime) spec(c containerSpec) ociSpec {
	ns := []ociNamespace{{"pid"}, {"mount"}, {"ipc"}, {"uts"}}
	if c.noNetwork {
		ns = append(ns, ociNamespace{"network"})
	}
	mounts := []ociMount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
	}
	if !c.noNetwork {
		// The host's network: its name resolution too.
		for _, f := range []string{"/etc/resolv.conf", "/etc/hosts"} {
			if _, err := os.Stat(f); err == nil {
				mounts = append(mounts, ociMount{Destination: f, Type: "bind", Source: f, Options: []string{"rbind", "ro"}})
			}
		}
	}
	mounts = append(mounts, c.extra...)
	res := ociResources{Pids: &ociPids{Limit: 4096}}
	if c.memoryMB > 0 {
		limit := c.memoryMB << 20
		res.Memory = &ociMemory{Limit: limit, Swap: limit}
	}
	if c.cpuMillis > 0 {
		q, p := cpuQuota(c.cpuMillis)
		res.CPU = &ociCPU{Quota: q, Period: uint64(p)}
	}
	hostname := c.hostname
	if hostname == "" {
		hostname = "herd"
	}
	return ociSpec{
		OCIVersion: "1.0.2",
		Process: ociProcess{
			Args: c.args, Env: c.env, Cwd: c.cwd,
			Capabilities:    ociCapabilities{Bounding: containerCaps, Effective: containerCaps, Permitted: containerCaps, Ambient: []string{}},
			NoNewPrivileges: true,
			Rlimits:         []ociRlimit{{Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 4096}},
		},
		Root:     ociRoot{Path: c.root, Readonly: true},
		Hostname: hostname,
		Mounts:   mounts,
		Linux: ociLinux{
			Namespaces: ns, Resources: res, CgroupsPath: "/" + ociCgroupParent + "/" + c.id,
			MaskedPaths: []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
				"/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
}

func writeSpec(bundle string, s ociSpec) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600)
}

// container is one attempt's container, handled like a process's limits:
// the runtime's "run" is the attempt's process (it passes the output
// through and exits with the container's status), and KillAll, OOMKilled
// and Release act on the container.
type container struct {
	rt     *ociRuntime
	id     string
	bundle string
	cache  *imageCache
	digest string
	// reaped is the runtime's exit status once the agent has waited for
	// it (set by reaped, read by the stop path too, hence atomic).
	reapedState atomic.Pointer[os.ProcessState]
}

// reaped records the runtime's exit status, after its Wait returned.
func (c *container) reaped(ps *os.ProcessState) { c.reapedState.Store(ps) }

// runtimeExited reports that the runtime's run ended by itself: the
// container's first process exited and was reaped, and with it every
// process of its PID namespace (the kernel kills them when it ends).
func (c *container) runtimeExited() bool {
	ps := c.reapedState.Load()
	if ps == nil {
		return false
	}
	_, sig := signalled(ps)
	return !sig
}

// command is the runtime's foreground run of the container, kept after it
// exits (--keep) so that its cgroup can be read, then deleted by Release.
func (c *container) command() *exec.Cmd {
	cmd := exec.Command(c.rt.path, "--root", c.rt.root, "run", "--keep", "--bundle", c.bundle, c.id)
	cmd.SysProcAttr = groupLeader()
	return cmd
}

func (c *container) Launch(cmd *exec.Cmd) error { return cmd.Start() }

func (c *container) Started(int) error { return nil }

// KillAll kills every process of the container: its PID namespace dies
// with its first process, whatever escaped the runtime's process group.
func (c *container) KillAll() {
	if c.runtimeExited() {
		return
	}
	_ = exec.Command(c.rt.path, "--root", c.rt.root, "kill", "--all", c.id, "KILL").Run()
}

// OOMKilled reads the container's memory cgroup: the kernel counts the
// processes its OOM killer ended there.
func (c *container) OOMKilled() bool {
	dir := filepath.Join(c.rt.cgroups.memory, ociCgroupParent, c.id)
	file, key := "memory.oom_control", "oom_kill"
	if c.rt.cgroups.v2 {
		file = "memory.events"
	}
	f, err := os.Open(filepath.Join(dir, file))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 2 && fields[0] == key {
			n, _ := strconv.ParseInt(fields[1], 10, 64)
			return n > 0
		}
	}
	return false
}

// Contained: once the runtime's state says the container stopped (or it
// is gone), none of its processes is left.
func (c *container) Contained() bool {
	if c.runtimeExited() {
		return true
	}
	out, err := exec.Command(c.rt.path, "--root", c.rt.root, "state", c.id).Output()
	if err != nil {
		return true // no such container: nothing is left
	}
	var st struct {
		Status string `json:"status"`
	}
	return json.Unmarshal(out, &st) == nil && st.Status == "stopped"
}

// Release deletes the container (its cgroup with it) and its bundle, and
// ends its use of the image.
func (c *container) Release() {
	// A container never created leaves nothing to delete: the error is
	// the runtime saying so.
	_ = exec.Command(c.rt.path, "--root", c.rt.root, "delete", "-f", c.id).Run()
	_ = os.RemoveAll(c.bundle)
	c.cache.release(c.digest)
}

// prepareContainer pulls the image and writes the attempt's bundle: the
// image's root read-only, the working directory at /work (the command's
// directory), the fetched inputs at /inputs and the node's datasets the
// task names under /datasets, all bound in.
func (a *Agent) prepareContainer(ctx context.Context, att api.Attempt, ts api.TaskSpec, workDir, inputs string, env []string) (*container, *exec.Cmd, string, error) {
	if a.oci == nil {
		return nil, nil, "", fmt.Errorf("this node runs no containers: %s", a.ociProblem)
	}
	img, err := a.images.acquire(ctx, ts.Image)
	if err != nil {
		return nil, nil, "", err
	}
	bundle := filepath.Join(a.cfg.DataDir, "oci", "bundles", att.ID)
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		a.images.release(img.Digest)
		return nil, nil, "", fmt.Errorf("container bundle: %w", err)
	}
	c := &container{rt: a.oci, id: "herd-" + att.ID, bundle: bundle, cache: a.images, digest: img.Digest}
	mounts := []ociMount{{Destination: "/work", Type: "bind", Source: workDir, Options: []string{"rbind", "rw"}}}
	// The task's environment: the image's, then the task's and HERD_*;
	// paths on the node become paths inside the container.
	cenv := append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp"}, img.Env...)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case k == "HERD_INPUTS":
			continue
		case strings.HasPrefix(k, "HERD_INPUT_") && v != "":
			dst := "/datasets/" + strings.ToLower(strings.TrimPrefix(k, "HERD_INPUT_"))
			mounts = append(mounts, ociMount{Destination: dst, Type: "bind", Source: v, Options: []string{"rbind", "ro"}})
			kv = k + "=" + dst
		}
		cenv = append(cenv, kv)
	}
	if inputs != "" {
		mounts = append(mounts, ociMount{Destination: "/inputs", Type: "bind", Source: inputs, Options: []string{"rbind", "ro"}})
		cenv = append(cenv, "HERD_INPUTS=/inputs")
	}
	cenv = append(cenv, "HERD_WORKDIR=/work")
	args := append(append([]string(nil), img.Entrypoint...), ts.Command...)
	s := a.oci.spec(containerSpec{
		id: c.id, root: img.Root, args: args, env: cenv, cwd: "/work", hostname: a.cfg.ID,
		memoryMB: ts.Resources.MemoryMB, cpuMillis: ts.Resources.CPUMillis, noNetwork: ts.Network == spec.NetworkNone, extra: mounts,
	})
	if err := writeSpec(bundle, s); err != nil {
		c.Release()
		return nil, nil, "", fmt.Errorf("container ts: %w", err)
	}
	// A container of this id left by a crash of the agent goes first.
	_ = exec.Command(a.oci.path, "--root", a.oci.root, "delete", "-f", c.id).Run()
	how := "pulled"
	if img.Hit {
		how = "cached"
	}
	return c, c.command(), fmt.Sprintf("image %s (%s, %s), runtime %s", ts.Image, shortDigest(img.Digest), how, a.oci.name), nil
}

func shortDigest(d string) string {
	if _, hex, ok := strings.Cut(d, ":"); ok && len(hex) > 12 {
		return hex[:12]
	}
	return d
}
