package cluster

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"herd/fsm"
)

// serverMetrics is what a replica exports at /metrics, in Prometheus'
// text format (prometheus/client_golang: its registry, exposition and
// lint, rather than a hand-written writer). Counters and histograms are
// this process's, kept as the leader works; the gauges are read from the
// replica's state at each scrape, so nothing is cached between scrapes.
// Each replica has its own registry: tests run three in one process.
type serverMetrics struct {
	reg *prometheus.Registry
	// own holds herd's own collectors alone, without the Go runtime's and
	// the process's (see Metrics).
	own              *prometheus.Registry
	allHTTP, ownHTTP http.Handler

	attemptsEnded *prometheus.CounterVec
	startLatency  prometheus.Histogram
	runDuration   prometheus.Histogram
}

func newServerMetrics(s *Server) *serverMetrics {
	m := &serverMetrics{
		reg: prometheus.NewRegistry(),
		attemptsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herd_attempts_ended_total", Help: "Attempts whose end this replica committed as leader, by outcome.",
		}, []string{"outcome"}),
		startLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "herd_task_submit_to_start_seconds", Help: "From a task's submission to its attempt's start, for the starts this replica committed as leader.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16),
		}),
		runDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "herd_attempt_run_seconds", Help: "How long attempts ran, start to end, for the ends this replica committed as leader.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 18),
		}),
	}
	herds := []prometheus.Collector{m.attemptsEnded, m.startLatency, m.runDuration, &stateCollector{s: s}}
	m.own = prometheus.NewRegistry()
	m.own.MustRegister(herds...)
	m.reg.MustRegister(herds...)
	m.reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	opts := promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}
	m.allHTTP, m.ownHTTP = promhttp.HandlerFor(m.reg, opts), promhttp.HandlerFor(m.own, opts)
	return m
}

// observeStart and observeEnd record a committed attempt start or end.
func (m *serverMetrics) observeStart(res *fsm.AttemptResult) {
	if m == nil || res == nil || res.Duplicate || res.Task == nil || res.Attempt == nil {
		return
	}
	if d := res.Attempt.StartedAt.Time().Sub(res.Task.SubmittedAt()); d >= 0 {
		m.startLatency.Observe(d.Seconds())
	}
}

func (m *serverMetrics) observeEnd(res *fsm.AttemptResult) {
	if m == nil || res == nil || res.Duplicate || res.Attempt == nil {
		return
	}
	a := res.Attempt
	m.attemptsEnded.WithLabelValues(string(a.State)).Inc()
	if !a.StartedAt.IsZero() {
		m.runDuration.Observe(a.FinishedAt.Sub(a.StartedAt).Seconds())
	}
}

// Registry is the replica's metrics registry (served at /metrics).
func (s *Server) Registry() *prometheus.Registry { return s.metrics.reg }

// Metrics serves the registry in Prometheus' text format. A scrape that
// names the families it wants (name[]=…, Prometheus' filter) and names
// herd's own alone is answered without gathering the Go runtime's and the
// process's: reading the process's files costs more than all of herd's
// families together, and a tool polling one counter (a script waiting
// for tasks to finish, the benchmark) would otherwise pay it every time.
func (s *Server) Metrics() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ownFamiliesOnly(r.URL.Query()["name[]"]) {
			s.metrics.ownHTTP.ServeHTTP(w, r)
			return
		}
		s.metrics.allHTTP.ServeHTTP(w, r)
	})
}

// ownFamiliesOnly reports whether a name[] filter asks for herd's own
// families alone.
func ownFamiliesOnly(names []string) bool {
	for _, n := range names {
		if !strings.HasPrefix(n, "herd_") {
			return false
		}
	}
	return len(names) > 0
}

var (
	descPasses      = prometheus.NewDesc("herd_scheduler_passes_total", "Scheduling passes this replica ran as leader.", nil, nil)
	descScanned     = prometheus.NewDesc("herd_scheduler_tasks_scanned_total", "Waiting tasks the passes looked at.", nil, nil)
	descPlacements  = prometheus.NewDesc("herd_scheduler_placements_total", "Placements decided and proposed.", nil, nil)
	descEntries     = prometheus.NewDesc("herd_scheduler_placement_entries_total", "Raft entries that carried placements.", nil, nil)
	descRefusals    = prometheus.NewDesc("herd_scheduler_refusals_total", "Placements the state machine refused at apply time, by reason.", []string{"reason"}, nil)
	descExplains    = prometheus.NewDesc("herd_scheduler_explanations_total", "Waiting tasks the passes explained.", nil, nil)
	descQueueDepth  = prometheus.NewDesc("herd_queue_depth", "Pending tasks at the leader's last pass.", nil, nil)
	descOldestWait  = prometheus.NewDesc("herd_queue_oldest_wait_seconds", "How long the longest-waiting pending task had waited at the leader's last pass.", nil, nil)
	descTasks       = prometheus.NewDesc("herd_tasks", "Tasks in the replicated state, by state.", []string{"state"}, nil)
	descNodes       = prometheus.NewDesc("herd_nodes", "Worker nodes, by liveness and tier.", []string{"liveness", "tier"}, nil)
	descQuarantined = prometheus.NewDesc("herd_nodes_quarantined", "Worker nodes quarantined (suspected or confirmed black holes).", nil, nil)
	descHBInterval  = prometheus.NewDesc("herd_node_heartbeat_interval_seconds", "The heartbeat interval in force for a node (stretched as its loss rises).", []string{"node"}, nil)
	descHBLoss      = prometheus.NewDesc("herd_node_heartbeat_loss_ratio", "A node's observed heartbeat loss.", []string{"node"}, nil)
	descGossip      = prometheus.NewDesc("herd_gossip_members", "Members of the gossip pool this replica sees.", nil, nil)
	descRaftState   = prometheus.NewDesc("herd_raft_state", "1 for this replica's Raft state.", []string{"state"}, nil)
	descRaftTerm    = prometheus.NewDesc("herd_raft_term", "This replica's current Raft term.", nil, nil)
	descCommit      = prometheus.NewDesc("herd_raft_commit_index", "The Raft commit index this replica knows.", nil, nil)
	descApplied     = prometheus.NewDesc("herd_raft_applied_index", "The last Raft index applied to this replica's state.", nil, nil)
	descApplyLag    = prometheus.NewDesc("herd_raft_apply_lag_entries", "Committed entries not yet applied here.", nil, nil)
	descLastContact = prometheus.NewDesc("herd_raft_last_contact_seconds", "Since this follower last heard from the leader (0 on the leader).", nil, nil)
	descSnapshot    = prometheus.NewDesc("herd_raft_entries_since_snapshot", "Entries applied since the last snapshot.", nil, nil)
	descSnapAge     = prometheus.NewDesc("herd_raft_snapshot_age_seconds", "Since this replica's latest snapshot on disk was taken (absent before its first).", nil, nil)
	descJobs        = prometheus.NewDesc("herd_jobs", "Jobs in the replicated state, by state.", []string{"state"}, nil)
	descCommands    = prometheus.NewDesc("herd_raft_commands_applied_total", "Commands this replica applied to its state since it started, by command.", []string{"command"}, nil)
	descLogBytes    = prometheus.NewDesc("herd_raft_applied_bytes_total", "Bytes of the Raft entries this replica applied since it started.", nil, nil)
)

// stateCollector reads a replica's counters and state at each scrape.
type stateCollector struct{ s *Server }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPasses, descScanned, descPlacements, descEntries, descRefusals, descExplains, descQueueDepth, descOldestWait,
		descTasks, descNodes, descQuarantined, descHBInterval, descHBLoss, descGossip, descRaftState, descRaftTerm, descCommit, descApplied, descApplyLag,
		descLastContact, descSnapshot, descSnapAge, descJobs, descCommands, descLogBytes} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	st := &s.schedStats
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(descPasses, st.Passes.Load())
	counter(descScanned, st.Scanned.Load())
	counter(descPlacements, st.Placements.Load())
	counter(descEntries, st.Entries.Load())
	counter(descExplains, st.Explains.Load())
	for reason, n := range st.Rejections() {
		counter(descRefusals, n, reason)
	}
	gauge(descQueueDepth, float64(st.QueueDepth.Load()))
	gauge(descOldestWait, float64(st.OldestWaitMs.Load())/1000)

	state := s.fsm.State()
	if counts, err := state.CountTasks(); err == nil {
		for ts, n := range counts {
			gauge(descTasks, float64(n), ts.String())
		}
	}
	jobs := map[string]int{}
	for _, j := range state.Jobs("", 0) {
		jobs[j.State]++
	}
	for js, n := range jobs {
		gauge(descJobs, float64(n), js)
	}
	if nodes, err := state.Nodes(); err == nil {
		type key struct{ liveness, tier string }
		byKey := map[key]int{}
		quarantined := 0
		for _, n := range nodes {
			byKey[key{string(n.Liveness), n.Tier.Tier.String()}]++
			if n.Quarantine != nil {
				quarantined++
			}
			o := s.Observation(n)
			gauge(descHBInterval, float64(o.IntervalMs)/1000, n.ID)
			gauge(descHBLoss, o.Loss, n.ID)
		}
		for k, n := range byKey {
			gauge(descNodes, float64(n), k.liveness, k.tier)
		}
		gauge(descQuarantined, float64(quarantined))
	}
	gauge(descGossip, float64(s.gossipMembers()))

	raftState := s.raft.State()
	for _, rs := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		v := 0.0
		if rs == raftState {
			v = 1
		}
		gauge(descRaftState, v, rs.String())
	}
	stats := s.raft.Stats()
	num := func(k string) float64 { v, _ := strconv.ParseFloat(stats[k], 64); return v }
	gauge(descRaftTerm, num("term"))
	gauge(descCommit, num("commit_index"))
	gauge(descApplied, num("applied_index"))
	for name, n := range s.fsm.AppliedCommands() {
		counter(descCommands, n, name)
	}
	counter(descLogBytes, s.fsm.AppliedBytes())
	gauge(descApplyLag, max(num("commit_index")-num("applied_index"), 0))
	contact := 0.0
	if raftState != raft.Leader {
		if d, err := time.ParseDuration(stats["last_contact"]); err == nil {
			contact = d.Seconds()
		}
	}
	gauge(descLastContact, contact)
	gauge(descSnapshot, max(num("applied_index")-num("last_snapshot_index"), 0))
	if taken, ok := s.latestSnapshotTime(); ok {
		gauge(descSnapAge, max(time.Since(taken).Seconds(), 0))
	}
}

// latestSnapshotTime is when the newest snapshot in the store was taken:
// hashicorp/raft names each one term-index-milliseconds.
func (s *Server) latestSnapshotTime() (time.Time, bool) {
	if s.snaps == nil {
		return time.Time{}, false
	}
	metas, err := s.snaps.List()
	if err != nil || len(metas) == 0 {
		return time.Time{}, false
	}
	id := metas[0].ID
	ms, err := strconv.ParseInt(id[strings.LastIndexByte(id, '-')+1:], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// gossipMembers is how many members this replica's gossip pool holds (0
// without gossip).
func (s *Server) gossipMembers() int {
	if s.gossip == nil {
		return 0
	}
	s.gossip.mu.Lock()
	defer s.gossip.mu.Unlock()
	return len(s.gossip.members)
}
