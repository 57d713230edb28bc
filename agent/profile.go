package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"herd/api"
	"herd/internal/stageid"
)

// Benchmark budget: each figure is the median of benchSamples short
// samples, and a round whose samples spread over benchMaxSpreadPct is
// taken again, at most benchMaxRounds times, so the whole measurement
// stays under about 1.2 s of CPU on a weak box while one disturbed
// sample (another process, a frequency step) no longer makes the figure.
const (
	benchSamples      = 5
	benchCPUSample    = 50 * time.Millisecond
	benchMemorySample = 30 * time.Millisecond
	benchMemoryMiB    = 8 // copied back and forth: beyond an Atom's caches
	benchFsyncs       = 5
	benchMaxRounds    = 3
	benchMaxSpreadPct = 25
)

// Measure benchmarks the node (single-core SHA-256 throughput, memory
// bandwidth, the fsync latency of dataDir) and detects its cores, memory
// and free disk. With noBench it reports only what it detects.
func Measure(dataDir string, noBench bool) api.NodeProfile {
	p := api.NodeProfile{Cores: runtime.NumCPU(), MemoryMB: machineMemoryMB(), DiskFreeMB: freeDiskMB(dataDir)}
	if noBench {
		return p
	}
	start := time.Now()
	mem := newMemoryBench()
	for p.Rounds < benchMaxRounds {
		p.Rounds++
		cpu, copies := make([]int64, benchSamples), make([]int64, benchSamples)
		for i := range benchSamples { // interleaved: a disturbance hits both alike
			cpu[i] = benchCPU(benchCPUSample)
			copies[i] = mem.run(benchMemorySample)
		}
		p.CPUScore, p.CPUSpreadPct = medianSpread(cpu)
		p.MemoryMBps, p.MemorySpreadPct = medianSpread(copies)
		if p.CPUSpreadPct <= benchMaxSpreadPct && p.MemorySpreadPct <= benchMaxSpreadPct {
			break
		}
	}
	p.FsyncMicros = benchFsync(dataDir)
	p.Benchmarked = true
	p.BenchMillis = time.Since(start).Milliseconds()
	return p
}

// medianSpread returns the median of samples and their spread, (max -
// min) / median in percent.
func medianSpread(samples []int64) (median, spreadPct int64) {
	s := slices.Clone(samples)
	slices.Sort(s)
	median = s[len(s)/2]
	if median <= 0 {
		return median, 0
	}
	return median, (s[len(s)-1] - s[0]) * 100 / median
}

// benchCPU hashes a 64 KiB buffer on one goroutine for d: MB/s.
func benchCPU(d time.Duration) int64 {
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = byte(i)
	}
	var n int64
	start := time.Now()
	for time.Since(start) < d {
		for range 8 {
			sum := sha256.Sum256(buf)
			buf[0] ^= sum[0]
			n += int64(len(buf))
		}
	}
	return mbPerSecond(n, time.Since(start))
}

// memoryBench copies two buffers larger than the caches back and forth.
// They are written once before any sample: a first touch of fresh pages
// measures the kernel's page faults, not the memory.
type memoryBench struct{ a, b []byte }

func newMemoryBench() *memoryBench {
	m := &memoryBench{a: make([]byte, benchMemoryMiB<<20), b: make([]byte, benchMemoryMiB<<20)}
	for i := 0; i < len(m.a); i += 4096 {
		m.a[i], m.b[i] = 1, 1
	}
	return m
}

// run copies for d: MB/s copied.
func (m *memoryBench) run(d time.Duration) int64 {
	var n int64
	start := time.Now()
	for time.Since(start) < d {
		copy(m.b, m.a)
		copy(m.a, m.b)
		n += 2 * int64(len(m.a))
	}
	return mbPerSecond(n, time.Since(start))
}

// benchFsync writes and fsyncs 4 KiB in dir a few times: the median
// latency in µs, 0 when dir cannot be written.
func benchFsync(dir string) int64 {
	f, err := os.CreateTemp(dir, ".herd-bench-*")
	if err != nil {
		return 0
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := bytes.Repeat([]byte{'h'}, 4096)
	var lat []int64
	for range benchFsyncs {
		start := time.Now()
		if _, err := f.Write(block); err != nil {
			return 0
		}
		if err := f.Sync(); err != nil {
			return 0
		}
		lat = append(lat, time.Since(start).Microseconds())
	}
	slices.Sort(lat)
	return max(lat[len(lat)/2], 1)
}

func mbPerSecond(n int64, d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(float64(n) / 1e6 / d.Seconds())
}

// profiler keeps the node's profile and datasets current with the
// cluster: it measures at registration, on request and every
// RebenchInterval; it re-measures the datasets every minute and reports
// them when they change; it runs the health check the cluster asks for.
type profiler struct {
	a *Agent

	mu       sync.Mutex
	profile  *api.NodeProfile
	datasets []api.Dataset
	outputs  map[string]api.Dataset // datasets left by attempts' outputs
	// rebenchDone and checkDone are the latest requests handled.
	rebenchDone, checkDone uint64
	measuredAt             time.Time
	busy                   bool // a check or a measurement runs
	// seen is set once an answer after registration was handled: the
	// rebenches asked before it are met by the registration's measure.
	seen bool
	poke chan struct{}
}

// measure measures the node, or gives the profile configured in its
// place.
func (p *profiler) measure() api.NodeProfile {
	if given := p.a.cfg.Profile; given != nil {
		return *given
	}
	return Measure(p.a.cfg.DataDir, p.a.cfg.NoBench)
}

func newProfiler(a *Agent) *profiler {
	return &profiler{a: a, outputs: map[string]api.Dataset{}, poke: make(chan struct{}, 1)}
}

// forRegistration measures the node the first time and returns what a
// registration carries.
func (p *profiler) forRegistration() (*api.NodeProfile, []api.Dataset) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.profile == nil {
		m := p.measure()
		p.profile, p.measuredAt = &m, time.Now()
		p.a.logger.Info("node measured", "cpu_score", m.CPUScore, "memory_mbps", m.MemoryMBps, "fsync_us", m.FsyncMicros,
			"cores", m.Cores, "memory_mb", m.MemoryMB, "disk_free_mb", m.DiskFreeMB, "took_ms", m.BenchMillis)
	}
	p.datasets = p.measureDatasets()
	out := *p.profile
	return &out, slices.Clone(p.datasets)
}

// measureDatasets sizes the configured datasets and the kept outputs,
// sorted by name. A configured dataset whose path is gone is left out.
func (p *profiler) measureDatasets() []api.Dataset {
	var out []api.Dataset
	for name, path := range p.a.cfg.Datasets {
		size, err := pathSize(path)
		if err != nil {
			continue
		}
		out = append(out, api.Dataset{Name: name, Bytes: size})
	}
	for name, d := range p.outputs {
		if _, configured := p.a.cfg.Datasets[name]; !configured {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// pathSize is the bytes of a file, or of every file under a directory.
func pathSize(path string) (int64, error) {
	var total int64
	err := filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			total += info.Size()
		}
		return nil
	})
	return total, err
}

// handle acts on what the cluster's assignments ask of the node: a
// rebench or a health check not done yet, each once, in the background.
func (p *profiler) handle(ctx context.Context, as *api.Assignments) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.seen {
		p.seen = true
		p.rebenchDone = max(p.rebenchDone, as.Rebench)
	}
	if p.busy {
		return
	}
	switch {
	case as.HealthCheck > p.checkDone:
		p.busy = true
		seq := as.HealthCheck
		go p.runCheck(ctx, seq)
	case as.Rebench > p.rebenchDone:
		p.busy = true
		seq := as.Rebench
		go p.rebench(ctx, seq, "asked by the cluster")
	}
}

func (p *profiler) done(check, rebench uint64) {
	p.mu.Lock()
	p.busy = false
	p.checkDone = max(p.checkDone, check)
	p.rebenchDone = max(p.rebenchDone, rebench)
	p.mu.Unlock()
	select {
	case p.poke <- struct{}{}:
	default:
	}
}

// Link probes: the round trip is the median of linkRTTProbes empty
// probes, the throughput that of linkBulkProbes of linkBulkBytes.
const (
	linkRTTProbes  = 5
	linkBulkProbes = 3
	linkBulkBytes  = 1 << 20
)

// measureLink times probes of the servers into m: the median round trip
// of an empty probe and the throughput of a 1 MiB one (its time less the
// round trip). It leaves m as it is when a probe fails.
func (p *profiler) measureLink(ctx context.Context, m *api.NodeProfile) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rtts := make([]int64, 0, linkRTTProbes)
	for range linkRTTProbes {
		d, err := p.a.client.Probe(ctx, p.a.cfg.ID, 0)
		if err != nil {
			p.a.logger.Debug("link probe failed", "error", err)
			return
		}
		rtts = append(rtts, max(d.Microseconds(), 1))
	}
	rtt, _ := medianSpread(rtts)
	rates := make([]int64, 0, linkBulkProbes)
	for range linkBulkProbes {
		d, err := p.a.client.Probe(ctx, p.a.cfg.ID, linkBulkBytes)
		if err != nil {
			p.a.logger.Debug("link probe failed", "error", err)
			return
		}
		rates = append(rates, mbPerSecond(linkBulkBytes, max(d-time.Duration(rtt)*time.Microsecond, time.Microsecond)))
	}
	m.RTTMicros = rtt
	m.NetworkMBps, _ = medianSpread(rates)
}

// rebench measures the node again and reports it.
func (p *profiler) rebench(ctx context.Context, seq uint64, why string) {
	m := p.measure()
	if !p.a.cfg.NoBench && p.a.cfg.Profile == nil {
		p.measureLink(ctx, &m)
	}
	_, err := p.a.client.ReportProfile(ctx, p.a.cfg.ID, p.a.session.Load(), m)
	if err != nil {
		p.a.logger.Warn("could not report the node's profile", "error", err)
		p.done(0, 0)
		return
	}
	p.mu.Lock()
	p.profile, p.measuredAt = &m, time.Now()
	p.mu.Unlock()
	p.a.logger.Info("node measured again", "why", why, "cpu_score", m.CPUScore, "cpu_spread_pct", m.CPUSpreadPct, "memory_mbps", m.MemoryMBps,
		"memory_spread_pct", m.MemorySpreadPct, "rounds", m.Rounds, "fsync_us", m.FsyncMicros, "rtt_us", m.RTTMicros, "network_mbps", m.NetworkMBps)
	p.done(0, seq)
}

// reportLink measures the link to the servers and reports the profile
// with it, unless benchmarks are off or a measurement is under way.
func (p *profiler) reportLink(ctx context.Context) {
	p.mu.Lock()
	if p.a.cfg.NoBench || p.a.cfg.Profile != nil || p.busy || p.profile == nil {
		p.mu.Unlock()
		return
	}
	p.busy = true
	m := *p.profile
	p.mu.Unlock()
	p.measureLink(ctx, &m)
	if m.RTTMicros > 0 {
		if _, err := p.a.client.ReportProfile(ctx, p.a.cfg.ID, p.a.session.Load(), m); err != nil {
			p.a.logger.Warn("could not report the link to the servers", "error", err)
		} else {
			p.mu.Lock()
			p.profile = &m
			p.mu.Unlock()
			p.a.logger.Info("link to the servers measured", "rtt_us", m.RTTMicros, "network_mbps", m.NetworkMBps)
		}
	}
	p.done(0, 0)
}

// runCheck runs the health check and answers request seq.
func (p *profiler) runCheck(ctx context.Context, seq uint64) {
	passed, output := p.a.healthCheck(ctx)
	_, err := p.a.client.ReportHealthCheck(ctx, p.a.cfg.ID, api.HealthCheckReport{Seq: seq, Passed: passed, Output: output})
	if err != nil {
		var se *api.StatusError
		if !errors.As(err, &se) || se.Code != http.StatusConflict {
			p.a.logger.Warn("could not report the health check", "seq", seq, "error", err)
			p.done(0, 0)
			return
		}
	}
	p.a.logger.Info("health check", "seq", seq, "passed", passed, "output", output)
	p.done(seq, 0)
}

// run re-measures on the rebench interval and keeps the datasets current.
// It first measures the link to the servers, which a registration cannot
// carry (the node has no identity before it), and reports it.
func (p *profiler) run(ctx context.Context) {
	p.reportLink(ctx)
	tick := time.NewTicker(min(time.Minute, max(p.a.cfg.DatasetRefresh, 100*time.Millisecond)))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-p.poke:
		}
		p.mu.Lock()
		due := !p.busy && p.a.cfg.RebenchInterval > 0 && time.Since(p.measuredAt) >= p.a.cfg.RebenchInterval
		if due {
			p.busy = true
		}
		ds := p.measureDatasets()
		changed := !slices.Equal(ds, p.datasets)
		p.mu.Unlock()
		if due {
			p.rebench(ctx, 0, "rebench interval")
		}
		if changed {
			if _, err := p.a.client.ReportDatasets(ctx, p.a.cfg.ID, p.a.session.Load(), ds); err != nil {
				p.a.logger.Warn("could not report datasets", "error", err)
				continue
			}
			p.mu.Lock()
			p.datasets = ds
			p.mu.Unlock()
		}
	}
}

// keepOutputs moves an attempt's declared outputs out of its working
// directory into the node's outputs directory, where they stay as
// datasets of the node (a later output of the same name replaces an
// earlier one). A declared output the task did not leave is skipped.
func (p *profiler) keepOutputs(taskID, workDir string, names []string) {
	if len(names) == 0 {
		return
	}
	dir := filepath.Join(p.a.cfg.DataDir, "outputs")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		p.a.logger.Warn("cannot keep outputs", "error", err)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, name := range names {
		src := filepath.Join(workDir, name)
		info, err := os.Stat(src)
		if err != nil {
			p.a.logger.Warn("declared output missing", "output", name, "error", err)
			continue
		}
		dataset := name
		if stageid.IsStageTask(taskID) {
			dataset = stageid.Output(taskID, name)
		}
		dst := filepath.Join(dir, dataset)
		_ = os.RemoveAll(dst)
		if err := os.Rename(src, dst); err != nil {
			p.a.logger.Warn("cannot keep output", "output", name, "error", err)
			continue
		}
		size := info.Size()
		if info.IsDir() {
			size, _ = pathSize(dst)
		}
		p.outputs[dataset] = api.Dataset{Name: dataset, Bytes: size}
	}
	select {
	case p.poke <- struct{}{}:
	default:
	}
}

// loadOutputs finds outputs kept by an earlier run of the agent.
func (p *profiler) loadOutputs() {
	entries, err := os.ReadDir(filepath.Join(p.a.cfg.DataDir, "outputs"))
	if err != nil {
		return
	}
	for _, e := range entries {
		size, err := pathSize(filepath.Join(p.a.cfg.DataDir, "outputs", e.Name()))
		if err == nil {
			p.outputs[e.Name()] = api.Dataset{Name: e.Name(), Bytes: size}
		}
	}
}

// healthCheck runs the site's check (HealthCheck, through /bin/sh -c,
// with a minute to answer) or, without one, the built-in check, which
// exercises what tasks need, the way tasks get it: the data directory
// takes a write, `sh` found through the PATH tasks see starts in a
// working directory of its own and answers, a container starts when the
// node advertises the oci driver, and the clock is sane. It returns
// whether the node passed and what it said.
func (a *Agent) healthCheck(ctx context.Context) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if a.cfg.HealthCheck != "" {
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", a.cfg.HealthCheck)
		cmd.Dir = a.cfg.DataDir
		cmd.SysProcAttr = groupLeader()
		out, err := cmd.CombinedOutput()
		text := strings.TrimSpace(string(out))
		if len(text) > 400 {
			text = text[len(text)-400:]
		}
		if err != nil {
			if text == "" {
				text = err.Error()
			}
			return false, fmt.Sprintf("%s: %s", a.cfg.HealthCheck, text)
		}
		return true, text
	}
	dir, err := os.MkdirTemp(a.cfg.DataDir, ".herd-health-*")
	if err != nil {
		return false, "data directory not writable: " + err.Error()
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "probe"), []byte("ok"), 0o600); err != nil {
		return false, "data directory not writable: " + err.Error()
	}
	// As a task's command is started: looked up in the agent's PATH,
	// with the agent's environment, in a directory of its own.
	cmd := a.paths.command("sh", "-c", "echo ok")
	if cmd.Err != nil {
		return false, "a task's command cannot start: sh: " + cmd.Err.Error()
	}
	cmd.Dir = dir
	cmd.Env = os.Environ()
	cmd.SysProcAttr = groupLeader()
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		return false, fmt.Sprintf("a task's command does not run: sh -c 'echo ok' answered %q (%v)", strings.TrimSpace(string(out)), err)
	}
	kinds := "a shell task runs"
	if a.oci != nil {
		if err := a.oci.probe(filepath.Join(dir, "oci")); err != nil {
			return false, "a container task cannot run: " + err.Error()
		}
		kinds += ", a container starts"
	}
	if now := a.clock.Now(); now.Year() < 2024 {
		return false, "clock not sane: it reads " + now.Format(time.RFC3339)
	}
	return true, "built-in check: data directory writable, " + kinds + ", clock sane"
}

// localPath is where this node holds a dataset: a kept output, or a
// configured dataset.
func (p *profiler) localPath(name string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.outputs[name]; ok {
		return filepath.Join(p.a.cfg.DataDir, "outputs", name), true
	}
	path, ok := p.a.cfg.Datasets[name]
	return path, ok
}

// inputEnv tells a task where the inputs this node holds are:
// HERD_INPUT_<NAME>=PATH for each (the name upper-cased, anything but
// letters and digits as '_'). An input held elsewhere has no variable.
func (p *profiler) inputEnv(inputs []string) []string {
	if len(inputs) == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, name := range inputs {
		path, ok := p.a.cfg.Datasets[name]
		if !ok {
			if _, kept := p.outputs[name]; !kept {
				continue
			}
			path = filepath.Join(p.a.cfg.DataDir, "outputs", name)
		}
		out = append(out, "HERD_INPUT_"+envName(name)+"="+path)
	}
	return out
}

func envName(name string) string {
	b := []byte(strings.ToUpper(name))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}
