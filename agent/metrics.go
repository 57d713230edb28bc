package agent

import (
	"io/fs"
	"net/http"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

var (
	descRunning   = prometheus.NewDesc("herd_agent_running_attempts", "Attempts this agent runs now.", nil, nil)
	descSlots     = prometheus.NewDesc("herd_agent_slots", "Attempts this agent may run at once.", nil, nil)
	descLimits    = prometheus.NewDesc("herd_agent_limits_info", "How this agent enforces resource limits (the method is the label; the value is 1).", []string{"method"}, nil)
	descStarted   = prometheus.NewDesc("herd_agent_attempts_started_total", "Attempt starts the cluster recorded for this agent.", nil, nil)
	descCompleted = prometheus.NewDesc("herd_agent_attempts_completed_total", "Attempt results the cluster acknowledged.", nil, nil)
	descRejected  = prometheus.NewDesc("herd_agent_results_rejected_total", "Results the cluster refused as stale.", nil, nil)
	descFences    = prometheus.NewDesc("herd_agent_fences_total", "Attempts this agent stopped because its lease on them ran out.", nil, nil)
	descLapses    = prometheus.NewDesc("herd_agent_lease_lapses_total", "Times this agent's lease ran out.", nil, nil)
	descDisk      = prometheus.NewDesc("herd_agent_disk_bytes", "Bytes under the agent's data directory, by use (logs, outputs kept as datasets, unpacked images).", []string{"use"}, nil)
	descPulls     = prometheus.NewDesc("herd_agent_image_resolutions_total", "Images asked of the cache, by outcome: cached (nothing fetched), pulled, failed.", []string{"outcome"}, nil)
	descCacheMax  = prometheus.NewDesc("herd_agent_image_cache_max_bytes", "The image cache's cap on unpacked layers.", nil, nil)
)

// agentCollector reads the agent's counters and disk use at each scrape.
type agentCollector struct{ a *Agent }

func (c agentCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRunning, descSlots, descLimits, descStarted, descCompleted, descRejected, descFences, descLapses, descDisk, descPulls, descCacheMax} {
		ch <- d
	}
}

func (c agentCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge(descRunning, float64(len(a.Running())))
	gauge(descSlots, float64(a.cfg.Slots))
	gauge(descLimits, 1, a.limiter.Name())
	started, completed, rejected := a.Stats()
	counter(descStarted, started)
	counter(descCompleted, completed)
	counter(descRejected, rejected)
	counter(descFences, a.Fences())
	counter(descLapses, a.LeaseLapses())
	for _, use := range []string{"logs", "outputs"} {
		gauge(descDisk, float64(dirBytes(filepath.Join(a.cfg.DataDir, use))), use)
	}
	if a.images != nil {
		used, maxBytes, pulls, hits, failures, _ := a.images.status()
		gauge(descDisk, float64(used), "images")
		gauge(descCacheMax, float64(maxBytes))
		for outcome, n := range map[string]int64{"cached": hits, "pulled": pulls - failures, "failed": failures} {
			ch <- prometheus.MustNewConstMetric(descPulls, prometheus.CounterValue, float64(n), outcome)
		}
	}
}

// dirBytes is the size of the files under dir (0 when it is missing).
func dirBytes(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}

// Registry is the agent's metrics registry, served at /metrics on its
// data address.
func (a *Agent) Registry() *prometheus.Registry { return a.metrics }

func newAgentRegistry(a *Agent) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(agentCollector{a}, prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return reg
}

func (a *Agent) metricsHandler() http.Handler {
	return promhttp.HandlerFor(a.metrics, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
