package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"herd/api"

	"golang.org/x/sys/unix"
)

// cgroupV1 keeps a pool of idle cgroup pairs (memory, cpu) and reuses
// them, so that an attempt costs no cgroup creation and removal (kernel
// work that grows with the hierarchy, charged partly to nobody).
type cgroupV1 struct {
	memRoot, cpuRoot string
	prefix           string // unique to this limiter: several agents may share a root
	warn             []string

	mu    sync.Mutex
	idle  []*v1Group
	made  int
	close bool

	// home caches the cgroups the agent's threads sit in, where a
	// launching thread returns after the fork, and homeTasks their tasks
	// files, held open (see v1Group.tasks).
	homeMu    sync.Mutex
	home      map[string]string
	homeTasks map[string]*os.File
}

// v1Group is one pooled pair of cgroups. Besides its paths it remembers
// what the last attempt left in it, so that the next one rewrites and
// rereads only what it must; only the attempt holding the group uses it.
type v1Group struct {
	mem, cpu string
	// tasks holds the groups' tasks files open, by controller, from the
	// first launch on: a launch writes four of them (into both groups and
	// back out), and opening and closing each costs more than writing it.
	tasks  map[string]*os.File
	limits v1Limits // as last written; zero: unknown
	// oomKills is the group's OOM-kill count read after the last attempt,
	// trusted (oomKnown) only if nothing of that attempt was left in it.
	oomKills int64
	oomKnown bool
	// oomControl holds memory.oom_control open once read (oomOpen):
	// reread from its start, it shows the current counts (opening a
	// cgroup file cost more than reading it). Unlike the tasks and
	// cgroup.procs lists, which the kernel may answer from a cache kept
	// per open file, it is generated on every read. A plain descriptor:
	// one pread answers it, where an *os.File reads again to see the end.
	oomControl int
	oomOpen    bool
}

// oomKillCount reads the memory group's OOM-kill count (0 if unknown).
func (g *v1Group) oomKillCount() int64 {
	if !g.oomOpen {
		fd, err := unix.Open(filepath.Join(g.mem, "memory.oom_control"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0
		}
		g.oomControl, g.oomOpen = fd, true
	}
	var buf [512]byte
	n, err := unix.Pread(g.oomControl, buf[:], 0)
	if err != nil || n <= 0 {
		return 0
	}
	return keyedValue(buf[:n], "oom_kill")
}

// v1Limits are the values written into a group's limit files.
type v1Limits struct{ memory, quota, period string }

// v1PoolMax bounds the idle groups kept for reuse.
const v1PoolMax = 64

// v1Limiters numbers the limiters of this process, so that each names
// its groups apart from every other's: several agents may share one
// hierarchy (one machine, or one test process), and a group is only ever
// reused by the limiter that made it.
var v1Limiters atomic.Uint64

// newCgroupV1 uses the v1 memory and cpu hierarchies. Processes are moved
// in right after they start: a v1 cgroup cannot be entered at clone.
func newCgroupV1() (limiter, error) {
	mem, err := cgroupV1Mount("memory")
	if err != nil {
		return nil, err
	}
	cpu, err := cgroupV1Mount("cpu")
	if err != nil {
		return nil, err
	}
	l := &cgroupV1{
		memRoot: filepath.Join(mem, "herd"), cpuRoot: filepath.Join(cpu, "herd"),
		prefix: fmt.Sprintf("pool-%d-%d-", os.Getpid(), v1Limiters.Add(1)),
	}
	for _, d := range []string{l.memRoot, l.cpuRoot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
		sweepDeadPools(d)
	}
	if err := os.WriteFile(filepath.Join(l.cpuRoot, "cpu.shares"), []byte(strconv.Itoa(tasksCPUShares())), 0); err != nil {
		// The limits still hold; only busy processes elsewhere may hold
		// the tasks back.
		l.warn = append(l.warn, fmt.Sprintf("tasks keep the default CPU weight: %v", err))
	}
	return l, nil
}

// tasksCPUShares is the v1 cpu.shares of herd's parent group: as many
// times the default (1024, one busy process) as the machine has CPUs.
// The group sits at the top of the cpu hierarchy beside every other
// process of the machine. At the default weight, two busy processes
// elsewhere leave all the node's tasks together a third of the CPU, and
// a task that wakes then waits for seconds: an attempt's fork of `sh`
// measured up to 4.5 s, and a `sleep 0.2` task up to 8 s, beside two busy
// loops on 2 CPUs, against under 1 ms and 0.4 s at this weight. At this
// weight the tasks together hold their own against as many busy
// processes as there are CPUs.
func tasksCPUShares() int {
	return min(runtime.NumCPU()*1024, 262144) // the kernel's maximum
}

// sweepDeadPools removes from root the pooled groups of agents that no
// longer run: an agent that was killed could not remove its own. A
// group's name starts with the pid of the agent that made it; rmdir
// refuses a group that still holds a process, so one a leftover process
// of that agent still sits in stays (the agent's restart kills those).
func sweepDeadPools(root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "pool-")
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || pid == self {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			continue // its agent (or a process with its pid) still runs
		}
		_ = os.Remove(filepath.Join(root, e.Name()))
	}
}

// v1Mounts caches cgroupV1Mount for the process: every launch asks for
// the mounts of its thread's controllers, which do not move while the
// agent runs, so /proc/self/mountinfo is parsed once per controller. It
// is process-wide because the mounts are the machine's, the same for
// every limiter (tests run several agents in one process).
var v1Mounts sync.Map // controller → mount point

func cgroupV1Mount(controller string) (string, error) {
	if m, ok := v1Mounts.Load(controller); ok {
		return m.(string), nil
	}
	mount, err := findMount(func(fstype, options string) bool {
		return fstype == "cgroup" && contains(strings.Split(options, ","), controller)
	})
	if err != nil {
		return "", err
	}
	if mount == "" {
		return "", fmt.Errorf("no cgroup v1 %s hierarchy mounted", controller)
	}
	v1Mounts.Store(controller, mount)
	return mount, nil
}

func (c *cgroupV1) Name() string { return "cgroup-v1" }

func (c *cgroupV1) warnings() []string { return c.warn }

func (c *cgroupV1) Prepare(_ string, res api.Resources, _ *syscall.SysProcAttr) (limitHandle, error) {
	g, reused, err := c.take()
	if err != nil {
		return nil, err
	}
	oomBefore, err := configureV1(g, res)
	if err != nil && reused {
		// A reused group may refuse a lower memory limit while it still
		// holds the last attempt's page cache: start from a new one.
		c.discard(g)
		if g, err = c.make(); err != nil {
			return nil, err
		}
		oomBefore, err = configureV1(g, res)
	}
	if err != nil {
		c.discard(g)
		return nil, err
	}
	return &cgroupV1Handle{pool: c, v1Group: g, oomBefore: oomBefore}, nil
}

// configureV1 sets every limit of res in g ("-1" for none: a reused group
// keeps its last ones), writing only the values that differ from what
// the group was last given, and returns its OOM-kill count so far.
func configureV1(g *v1Group, res api.Resources) (int64, error) {
	want := v1Limits{memory: "-1", quota: "-1", period: "100000"}
	if res.MemoryMB > 0 {
		want.memory = strconv.FormatInt(res.MemoryMB<<20, 10)
	}
	if res.CPUMillis > 0 {
		q, period := cpuQuota(res.CPUMillis)
		want.quota, want.period = strconv.FormatInt(q, 10), strconv.FormatInt(period, 10)
	}
	have := g.limits
	g.limits = v1Limits{} // unknown until every write below succeeded
	if want.memory != have.memory {
		// memsw must stay at or above the memory limit: written before and
		// after it, one of the two succeeds (if the file exists at all).
		memsw := filepath.Join(g.mem, "memory.memsw.limit_in_bytes")
		_ = os.WriteFile(memsw, []byte(want.memory), 0)
		if err := os.WriteFile(filepath.Join(g.mem, "memory.limit_in_bytes"), []byte(want.memory), 0); err != nil {
			return 0, fmt.Errorf("set memory.limit_in_bytes: %w", err)
		}
		_ = os.WriteFile(memsw, []byte(want.memory), 0)
	}
	if want.period != have.period {
		_ = os.WriteFile(filepath.Join(g.cpu, "cpu.cfs_period_us"), []byte(want.period), 0)
	}
	if want.quota != have.quota || want.period != have.period {
		if err := os.WriteFile(filepath.Join(g.cpu, "cpu.cfs_quota_us"), []byte(want.quota), 0); err != nil {
			return 0, fmt.Errorf("set cpu.cfs_quota_us: %w", err)
		}
	}
	g.limits = want
	// The OOM-kill count covers the group's whole history.
	if g.oomKnown {
		g.oomKnown = false
		return g.oomKills, nil
	}
	return g.oomKillCount(), nil
}

// take returns an idle group (reused true), or makes one.
func (c *cgroupV1) take() (g *v1Group, reused bool, err error) {
	c.mu.Lock()
	if n := len(c.idle); n > 0 {
		g := c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		return g, true, nil
	}
	c.mu.Unlock()
	g, err = c.make()
	return g, false, err
}

// make creates a new pair of cgroups.
func (c *cgroupV1) make() (*v1Group, error) {
	c.mu.Lock()
	c.made++
	name := c.prefix + strconv.Itoa(c.made)
	c.mu.Unlock()
	g := &v1Group{mem: filepath.Join(c.memRoot, name), cpu: filepath.Join(c.cpuRoot, name)}
	for _, d := range []string{g.mem, g.cpu} {
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			c.discard(g)
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
	}
	return g, nil
}

// give returns a group whose processes have all exited to the pool; one
// still holding a process (or beyond the pool's size) is removed. empty
// says the caller has just seen it empty, with no way for a process to
// enter since.
func (c *cgroupV1) give(g *v1Group, empty bool) {
	if empty || holdsNoProcess(g.mem) {
		c.mu.Lock()
		if !c.close && len(c.idle) < v1PoolMax {
			c.idle = append(c.idle, g)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
	c.discard(g)
}

func (c *cgroupV1) discard(g *v1Group) {
	closeAll(g.tasks)
	g.tasks = nil
	if g.oomOpen {
		unix.Close(g.oomControl)
		g.oomOpen = false
	}
	_ = os.Remove(g.mem)
	_ = os.Remove(g.cpu)
}

func closeAll(files map[string]*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// tasksFiles returns the tasks file of each directory in dirs, by
// controller: those in open, and the others opened. A map handed out is
// never changed (a new one is made to add to it), so callers may read it
// without a lock.
func tasksFiles(open map[string]*os.File, dirs map[string]string) (map[string]*os.File, error) {
	if len(open) == len(dirs) {
		return open, nil
	}
	out := make(map[string]*os.File, len(dirs))
	for ctl, f := range open {
		out[ctl] = f
	}
	for ctl, dir := range dirs {
		if out[ctl] != nil {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, "tasks"), os.O_WRONLY, 0)
		if err != nil {
			return out, fmt.Errorf("open %s tasks: %w", ctl, err)
		}
		out[ctl] = f
	}
	return out, nil
}

// drain removes the idle groups; the agent calls it when it stops.
func (c *cgroupV1) drain() {
	c.mu.Lock()
	idle := c.idle
	c.idle, c.close = nil, true
	c.mu.Unlock()
	for _, g := range idle {
		c.discard(g)
	}
	c.homeMu.Lock()
	closeAll(c.homeTasks)
	c.homeTasks = nil
	c.homeMu.Unlock()
}

type cgroupV1Handle struct {
	pool *cgroupV1
	*v1Group
	oomBefore int64
	moveAfter bool // Launch could not fork from inside the cgroups
	// emptied: KillAll found no process left, after the launch: none can
	// enter the group any more, so Release need not look again.
	emptied bool
}

// Launch forks the process from a thread that sits in the attempt's
// cgroups for the duration of the fork, so the child starts inside them:
// v1 lets one thread of a process move (the "tasks" file), and a child
// inherits its forking thread's cgroups. The thread moves back afterwards;
// if it cannot, it is retired with its goroutine instead of being reused.
// It is never the process's main thread (see lockOffMainThread).
//
// The thread names itself "0" in the tasks files rather than by its id:
// the kernel moves the writing thread then without taking the lock that
// every fork and exit on the machine takes to read (a move by id takes it
// to write, waiting for the forks and exits under way and holding the
// new ones back), so a launch neither waits for other processes' forks
// nor stalls them.
func (h *cgroupV1Handle) Launch(cmd *exec.Cmd) error {
	start := cmd.Start
	type result struct{ err, moveErr error }
	done := make(chan result, 1)
	go lockOffMainThread(func() {
		self := []byte("0")
		dirs := map[string]string{"memory": h.mem, "cpu": h.cpu}
		home, err := h.pool.homeTasksFiles()
		if err == nil {
			h.tasks, err = tasksFiles(h.tasks, dirs)
		}
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{moveErr: err}
			return
		}
		var moved []string
		back := func() bool {
			ok := true
			for _, ctl := range moved {
				if _, err := home[ctl].Write(self); err != nil {
					ok = false
				}
			}
			return ok
		}
		for _, ctl := range []string{"memory", "cpu"} {
			if home[ctl] == nil {
				continue
			}
			if _, err := h.tasks[ctl].Write(self); err != nil {
				if back() {
					runtime.UnlockOSThread()
				}
				done <- result{moveErr: fmt.Errorf("enter %s: %w", dirs[ctl], err)}
				return
			}
			moved = append(moved, ctl)
		}
		err = start()
		if back() {
			runtime.UnlockOSThread()
		}
		done <- result{err: err}
	})
	r := <-done
	if r.moveErr != nil {
		// Could not fork from inside: start normally and move the process
		// in right after (a short window in which it runs unlimited).
		h.moveAfter = true
		return start()
	}
	return r.err
}

// lockOffMainThread locks the calling goroutine to a thread that is not
// the process's main thread and runs fn there, which unlocks it or not
// (a thread left locked is retired with its goroutine). The memory
// controller charges every page the process faults in to the memory
// group of its main thread: were that thread the one moved into an
// attempt's groups, what the agent's other threads allocate meanwhile
// would be charged to the attempt, counted against its limit, and left
// charged to the group after the attempt. A goroutine started while the
// main thread is locked here cannot run on it, so the work is handed to
// one.
func lockOffMainThread(fn func()) {
	runtime.LockOSThread()
	if !onMainThread() {
		fn()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		lockOffMainThread(fn)
	}()
	<-done
	runtime.UnlockOSThread()
}

// onMainThread reports whether the calling thread is the process's
// main thread (its thread id is the process id, read once: it does not
// change). A variable, so that a test can stand in for the main thread.
var onMainThread = func() bool { return unix.Gettid() == processID }

var processID = unix.Getpid()

// homeTasksFiles returns the tasks files of the agent's own v1 cgroups,
// by controller (one the agent is in no cgroup of is missing), found and
// opened once: every thread of the agent sits in them (a launching thread
// that cannot return is retired with its goroutine, never reused), so a
// launch needs no lookup of its own.
func (c *cgroupV1) homeTasksFiles() (map[string]*os.File, error) {
	c.homeMu.Lock()
	defer c.homeMu.Unlock()
	if c.home == nil {
		home, err := threadCgroupsV1()
		if err != nil {
			return nil, err
		}
		c.home = home
	}
	var err error
	c.homeTasks, err = tasksFiles(c.homeTasks, c.home)
	return c.homeTasks, err
}

// threadCgroupsV1 maps v1 controllers (memory, cpu) to the absolute
// directory of the calling thread's cgroup.
func threadCgroupsV1() (map[string]string, error) {
	b, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("read thread cgroups: %w", err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, ctl := range strings.Split(parts[1], ",") {
			if ctl != "memory" && ctl != "cpu" {
				continue
			}
			mount, err := cgroupV1Mount(ctl)
			if err != nil {
				return nil, err
			}
			out[ctl] = filepath.Join(mount, parts[2])
		}
	}
	if len(out) == 0 {
		return nil, errors.New("thread is in no v1 memory or cpu cgroup")
	}
	return out, nil
}

func (h *cgroupV1Handle) Started(pid int) error {
	if !h.moveAfter {
		return nil
	}
	for _, d := range []string{h.mem, h.cpu} {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("move %d into %s: %w", pid, d, err)
		}
	}
	return nil
}

func (h *cgroupV1Handle) KillAll() {
	var buf [512]byte
	b, err := readSmallFile(filepath.Join(h.mem, "cgroup.procs"), buf[:])
	if err != nil {
		return
	}
	pids := strings.Fields(string(b))
	h.emptied = len(pids) == 0
	for _, f := range pids {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func (h *cgroupV1Handle) Contained() bool { return h.emptied }

func (h *cgroupV1Handle) OOMKilled() bool {
	kills := h.oomKillCount()
	// The next attempt in this group counts from here, unless something
	// of this one may still run in it.
	h.oomKills, h.oomKnown = kills, h.emptied
	return kills > h.oomBefore
}

func (h *cgroupV1Handle) Release() { h.pool.give(h.v1Group, h.emptied) }

// guardCgroups are this limiter's groups, for the lease guard: every
// attempt's processes are in one of them, whatever they do to their
// environment or process group.
func (l *cgroupV1) guardCgroups() []guardCgroup {
	return []guardCgroup{{Dir: l.memRoot, Prefix: l.prefix}, {Dir: l.cpuRoot, Prefix: l.prefix}}
}
