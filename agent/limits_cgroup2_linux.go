package agent

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"herd/api"

	"golang.org/x/sys/unix"
)

type cgroupV2 struct {
	root string
	warn []string
}

func (c *cgroupV2) warnings() []string { return c.warn }

// newCgroupV2 finds a cgroup v2 hierarchy with the cpu and memory
// controllers and creates herd's parent group in it.
func newCgroupV2() (limiter, error) {
	mount, err := cgroup2Mount()
	if err != nil {
		return nil, err
	}
	self, err := ownCgroupV2()
	if err != nil {
		return nil, err
	}
	parent := filepath.Join(mount, self)
	ctrl, err := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("read controllers: %w", err)
	}
	have := strings.Fields(string(ctrl))
	for _, c := range []string{"cpu", "memory"} {
		if !contains(have, c) {
			return nil, fmt.Errorf("controller %s not available in %s", c, parent)
		}
	}
	root := filepath.Join(parent, "herd")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", root, err)
	}
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+cpu +memory"), 0); err != nil {
		return nil, fmt.Errorf("enable cpu and memory below %s: %w", parent, err)
	}
	if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+cpu +memory"), 0); err != nil {
		return nil, fmt.Errorf("enable cpu and memory below %s: %w", root, err)
	}
	// As in v1 (see tasksCPUShares): the tasks together weigh as many
	// busy processes as the machine has CPUs (the default weight is 100),
	// here against the agent's own threads and whatever else shares its
	// cgroup; the operator's unit sets the weight of that cgroup.
	c := &cgroupV2{root: root}
	weight := min(runtime.NumCPU()*100, 10000)
	if err := os.WriteFile(filepath.Join(root, "cpu.weight"), []byte(strconv.Itoa(weight)), 0); err != nil {
		// The limits still hold; only busy processes beside the tasks may
		// hold them back.
		c.warn = append(c.warn, fmt.Sprintf("tasks keep the default CPU weight: %v", err))
	}
	return c, nil
}

func cgroup2Mount() (string, error) {
	mount, err := findMount(func(fstype, _ string) bool { return fstype == "cgroup2" })
	if err != nil {
		return "", err
	}
	if mount == "" {
		return "", errors.New("no cgroup2 file system mounted")
	}
	return mount, nil
}

// findMount returns the mount point of the first mount whose file system
// type and super options match.
func findMount(match func(fstype, options string) bool) (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, fl := range fields {
			// Fields after the "-" separator: fstype, source, super options.
			if fl == "-" && i+3 < len(fields) && match(fields[i+1], fields[i+3]) {
				return fields[4], nil
			}
		}
	}
	return "", nil
}

func ownCgroupV2() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("read own cgroup: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return rest, nil
		}
	}
	return "", errors.New("not in a cgroup v2 hierarchy")
}

func (c *cgroupV2) Name() string { return "cgroup-v2" }

func (c *cgroupV2) Prepare(id string, res api.Resources, attr *syscall.SysProcAttr) (limitHandle, error) {
	dir := filepath.Join(c.root, id)
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	h := &cgroupV2Handle{dir: dir}
	if res.CPUMillis > 0 {
		q, p := cpuQuota(res.CPUMillis)
		if err := os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(fmt.Sprintf("%d %d", q, p)), 0); err != nil {
			h.Release()
			return nil, fmt.Errorf("set cpu.max: %w", err)
		}
	}
	if res.MemoryMB > 0 {
		limit := strconv.FormatInt(res.MemoryMB<<20, 10)
		if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte(limit), 0); err != nil {
			h.Release()
			return nil, fmt.Errorf("set memory.max: %w", err)
		}
		_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		h.Release()
		return nil, fmt.Errorf("open cgroup: %w", err)
	}
	h.fd = fd
	// The child is cloned straight into the cgroup: no window in which
	// it runs unlimited.
	attr.UseCgroupFD = true
	attr.CgroupFD = fd
	return h, nil
}

type cgroupV2Handle struct {
	dir string
	fd  int
}

func (h *cgroupV2Handle) Launch(cmd *exec.Cmd) error { return cmd.Start() }

func (h *cgroupV2Handle) Started(int) error {
	if h.fd > 0 {
		unix.Close(h.fd)
		h.fd = 0
	}
	return nil
}

func (h *cgroupV2Handle) KillAll() {
	_ = os.WriteFile(filepath.Join(h.dir, "cgroup.kill"), []byte("1"), 0)
}

func (h *cgroupV2Handle) Contained() bool { return holdsNoProcess(h.dir) }

// holdsNoProcess reports whether the cgroup dir is readable and empty.
func holdsNoProcess(dir string) bool {
	var buf [512]byte
	b, err := readSmallFile(filepath.Join(dir, "cgroup.procs"), buf[:])
	return err == nil && len(strings.TrimSpace(string(b))) == 0
}

func (h *cgroupV2Handle) OOMKilled() bool {
	return readKeyed(filepath.Join(h.dir, "memory.events"), "oom_kill") > 0
}

func (h *cgroupV2Handle) Release() {
	if h.fd > 0 {
		unix.Close(h.fd)
	}
	_ = os.Remove(h.dir)
}

// guardCgroups is herd's parent group below the agent's own, for the
// lease guard: every attempt's group is in it.
func (c *cgroupV2) guardCgroups() []guardCgroup { return []guardCgroup{{Dir: c.root}} }
