package scheduler

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"pgregory.net/rapid"
)

var now = time.Date(2026, 10, 2, 12, 0, 0, 0, time.UTC)

func node(id string, cores int64, busy int) *Node {
	return &Node{
		ID: id, Management: ManagementActive, Liveness: LivenessReady, Scheduling: SchedulingEligible,
		LastHeartbeat: now.Add(-5 * time.Second),
		Capabilities:  map[string][]string{"exec": {"1"}},
		Labels:        map[string]string{},
		Resources:     Resources{CPUMillis: cores * 1000, MemoryMB: 8192, DiskMB: 10000},
		Slots:         8, RunningAttempts: busy,
	}
}

// seedNodes is the worked example of docs/scheduling.md: node-a 4 cores with 2 busy
// attempts and the preferred label, node-b 8 idle cores with weight 150,
// node-c 16 idle cores whose heartbeat is 90 s old.
func seedNodes() []*Node {
	a := node("node-a", 4, 2)
	a.Labels["disk"] = "ssd"
	b := node("node-b", 8, 0)
	b.Weight = 150
	c := node("node-c", 16, 0)
	c.LastHeartbeat = now.Add(-90 * time.Second)
	return []*Node{a, b, c}
}

func seedRequest() *Request {
	return &Request{
		TaskID: "t1", Capability: "exec", CapabilityVersion: "1",
		PreferredLabels: map[string]string{"disk": "ssd"},
		Resources:       Resources{CPUMillis: 2000},
		Now:             now, HeartbeatTTL: 60 * time.Second,
	}
}

func TestSeedWorkedExample(t *testing.T) {
	tests := []struct {
		name     string
		cpuCores int64
		ttl      time.Duration
		winner   string
		score    int64
		summary  string
		scores   map[string]int64
	}{
		{
			name: "reference", cpuCores: 2, ttl: 60 * time.Second, winner: "node-a", score: 1_080_000,
			summary: "2/3 nodes eligible: 1 heartbeat expired",
			scores:  map[string]int64{"node-a": 1_080_000, "node-b": 150_000},
		},
		{
			name: "32-core minimum", cpuCores: 32, ttl: 60 * time.Second,
			summary: "0/3 nodes eligible: 3 CPU below minimum, 1 heartbeat expired",
		},
		{
			name: "120s heartbeat TTL", cpuCores: 2, ttl: 120 * time.Second, winner: "node-a", score: 1_080_000,
			summary: "3/3 nodes eligible",
			scores:  map[string]int64{"node-a": 1_080_000, "node-b": 150_000, "node-c": 100_000},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := seedRequest()
			req.Resources.CPUMillis = tc.cpuCores * 1000
			req.HeartbeatTTL = tc.ttl
			nodes := seedNodes()
			got, err := Select(nodes, req, nil)
			if tc.winner == "" {
				if err != ErrNoEligibleNode {
					t.Fatalf("want no eligible node, got %v %v", got.Node, err)
				}
			} else if err != nil || got.Node.ID != tc.winner || got.Score != tc.score {
				t.Fatalf("want %s scoring %d, got %+v %v", tc.winner, tc.score, got, err)
			}
			ex := Explain(nodes, req, nil)
			if ex.Summary != tc.summary {
				t.Fatalf("summary %q, want %q", ex.Summary, tc.summary)
			}
			for _, ne := range ex.Nodes {
				want, ok := tc.scores[ne.NodeID]
				if ok != ne.Eligible || (ok && *ne.Score != want) {
					t.Fatalf("%s: eligible=%v score=%v, want eligible=%v score=%d (reasons %v)", ne.NodeID, ne.Eligible, ne.Score, ok, want, ne.Reasons)
				}
			}
		})
	}
}

func TestExplainSummaryFormat(t *testing.T) {
	req := &Request{Capability: "gpu-infer", CapabilityVersion: "2", Resources: Resources{CPUMillis: 8000}, Now: now, HeartbeatTTL: 30 * time.Second}
	var nodes []*Node
	for i := 0; i < 3; i++ {
		n := node(fmt.Sprintf("small-%d", i), 2, 0)
		n.Capabilities["gpu-infer"] = []string{"2"}
		nodes = append(nodes, n)
	}
	stale := node("stale", 16, 0)
	stale.Capabilities["gpu-infer"] = []string{"2"}
	stale.LastHeartbeat = now.Add(-time.Hour)
	old := node("old-driver", 16, 0)
	old.Capabilities["gpu-infer"] = []string{"1"}
	nodes = append(nodes, stale, old)
	ex := Explain(nodes, req, nil)
	want := "0/5 nodes eligible: 3 CPU below minimum, 1 heartbeat expired, 1 missing capability gpu-infer@2"
	if ex.Summary != want {
		t.Fatalf("summary\n got %q\nwant %q", ex.Summary, want)
	}
	for _, ne := range ex.Nodes {
		if ne.NodeID == "small-0" && ne.Reasons[0].String() != "CPU below minimum (2000 < 8000 millis)" {
			t.Fatalf("reason text: %q", ne.Reasons[0].String())
		}
		if ne.NodeID == "old-driver" && ne.Reasons[0].String() != "missing capability gpu-infer@2 (node has gpu-infer@1)" {
			t.Fatalf("reason text: %q", ne.Reasons[0].String())
		}
	}
}

func TestEveryFilterRuleHasItsReason(t *testing.T) {
	base := func() (*Node, *Request) {
		n := node("n", 4, 0)
		n.Labels["zone"] = "a"
		n.Resources.GPU = 1
		return n, &Request{TaskID: "t", Capability: "exec", CapabilityVersion: "1", RequiredLabels: map[string]string{"zone": "a"},
			Resources: Resources{CPUMillis: 1000, MemoryMB: 100, GPU: 1, DiskMB: 10}, Now: now, HeartbeatTTL: time.Minute}
	}
	cases := map[ReasonCode]func(n *Node, r *Request){
		ReasonNotActive:         func(n *Node, _ *Request) { n.Management = ManagementDraining },
		ReasonNotReady:          func(n *Node, _ *Request) { n.Liveness = LivenessSuspect },
		ReasonIneligible:        func(n *Node, _ *Request) { n.Scheduling = SchedulingIneligible },
		ReasonHeartbeatExpired:  func(n *Node, _ *Request) { n.LastHeartbeat = now.Add(-2 * time.Minute) },
		ReasonMissingCapability: func(_ *Node, r *Request) { r.CapabilityVersion = "2" },
		ReasonLabelMismatch:     func(n *Node, _ *Request) { n.Labels["zone"] = "b" },
		ReasonCPUBelowMinimum:   func(_ *Node, r *Request) { r.Resources.CPUMillis = 5000 },
		ReasonMemoryBelowMin:    func(_ *Node, r *Request) { r.Resources.MemoryMB = 1 << 20 },
		ReasonGPUBelowMinimum:   func(_ *Node, r *Request) { r.Resources.GPU = 2 },
		ReasonDiskBelowMinimum:  func(_ *Node, r *Request) { r.Resources.DiskMB = 1 << 30 },
		ReasonNoFreeSlot:        func(n *Node, _ *Request) { n.RunningAttempts = n.Slots },
		ReasonInsufficientFree:  func(n *Node, _ *Request) { n.Reserved.GPU = 1 },
		ReasonBlacklisted:       func(n *Node, r *Request) { r.Blacklist = map[string]bool{n.ID: true} },
	}
	n, r := base()
	if rs := Check(n, r); len(rs) != 0 || !Eligible(n, r) {
		t.Fatalf("base node should be eligible: %v", rs)
	}
	for code, mutate := range cases {
		n, r := base()
		mutate(n, r)
		rs := Check(n, r)
		if len(rs) != 1 || rs[0].Code != code || Eligible(n, r) {
			t.Errorf("%s: got %v", code, rs)
		}
		if rs[0].Summary == "" || strings.Contains(rs[0].String(), "%!") {
			t.Errorf("%s: bad text %q", code, rs[0].String())
		}
	}
}

func TestTiesBreakByNodeID(t *testing.T) {
	nodes := []*Node{node("c", 4, 0), node("a", 4, 0), node("b", 4, 0)}
	got, err := Select(nodes, seedRequest(), nil)
	if err != nil || got.Node.ID != "a" {
		t.Fatalf("want a, got %+v %v", got, err)
	}
	ranked := Rank(nodes, seedRequest(), nil)
	if ranked[0].Node.ID != "a" || ranked[1].Node.ID != "b" || ranked[2].Node.ID != "c" {
		t.Fatalf("rank order %v %v %v", ranked[0].Node.ID, ranked[1].Node.ID, ranked[2].Node.ID)
	}
}

func TestWeightedRandomIsSeededAndSpreads(t *testing.T) {
	nodes := []*Node{node("a", 4, 0), node("b", 4, 0), node("c", 4, 1)}
	pick := func(seed uint64) []string {
		cfg := &Config{RandomTopK: 3}
		var out []string
		for i := 0; i < 200; i++ {
			req := seedRequest()
			req.Seed = seed + uint64(i)
			c, err := Select(nodes, req, cfg)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, c.Node.ID)
		}
		return out
	}
	first, again := pick(42), pick(42)
	if strings.Join(first, ",") != strings.Join(again, ",") {
		t.Fatal("the same seed must give the same choices")
	}
	seen := map[string]int{}
	for _, id := range first {
		seen[id]++
	}
	if len(seen) != 3 || seen["c"] >= seen["a"] {
		t.Fatalf("draws should reach every top node, favouring higher scores: %v", seen)
	}
}

func TestProfileScoreIsOptional(t *testing.T) {
	a, b := node("a", 4, 0), node("b", 4, 0)
	b.Profile = Profile{Health: 1, Datasets: []Dataset{{Name: "cam-7", Bytes: 1 << 30}}}
	req := seedRequest()
	req.Inputs = []Input{{Name: "cam-7", Bytes: 1 << 30}}
	nodes := []*Node{a, b}
	if got, _ := Select(nodes, req, nil); got.Node.ID != "a" {
		t.Fatalf("without profile scoring ties go by id, got %s", got.Node.ID)
	}
	cfg := &Config{ProfileScale: 100_000, ProfileWeights: DefaultProfileWeights()}
	if got, _ := Select(nodes, req, cfg); got.Node.ID != "b" {
		t.Fatalf("with profile scoring the healthy node holding the data wins, got %s", got.Node.ID)
	}
	if ps := ProfileScore(b, req, DefaultProfileWeights()); ps <= 0.6 || ps > 1 {
		t.Fatalf("profile score %f out of range", ps)
	}
	// A preferred label still outweighs the best profile.
	a.Labels["disk"] = "ssd"
	if got, _ := Select(nodes, req, cfg); got.Node.ID != "a" {
		t.Fatalf("preferred label must dominate profile, got %s", got.Node.ID)
	}
}

func qt(id, submitter string, prio int, seq uint64, queued time.Time) QueuedTask {
	return QueuedTask{ID: id, Submitter: submitter, Priority: prio, Seq: seq, QueuedAt: queued}
}

func ids(ts []QueuedTask) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.ID
	}
	return strings.Join(s, ",")
}

func TestQueueOrderPriorityThenFairness(t *testing.T) {
	cfg := DefaultQueueConfig()
	tasks := []QueuedTask{
		qt("a1", "A", 50, 1, now), qt("a2", "A", 50, 2, now), qt("a3", "A", 50, 3, now),
		qt("b1", "B", 50, 4, now), qt("c1", "C", 90, 5, now), qt("b2", "B", 50, 6, now),
	}
	got := ids(Order(tasks, now, cfg))
	if got != "c1,a1,b1,a2,b2,a3" {
		t.Fatalf("order %s", got)
	}
	// Retried tasks lose priority per failure.
	retried := qt("r", "A", 60, 0, now)
	retried.Failures = 2
	got = ids(Order([]QueuedTask{retried, qt("f", "B", 45, 9, now)}, now, cfg))
	if got != "f,r" {
		t.Fatalf("a twice-failed priority-60 task ranks below a fresh 45: %s", got)
	}
	// Backoff: not before its time.
	later := qt("later", "A", 100, 1, now)
	later.NotBefore = now.Add(time.Second)
	if got := ids(Order([]QueuedTask{later}, now, cfg)); got != "" {
		t.Fatalf("backing-off task must not be schedulable: %s", got)
	}
}

func TestQueueFloodCannotMonopoliseHead(t *testing.T) {
	var tasks []QueuedTask
	for i := 0; i < 1000; i++ {
		tasks = append(tasks, qt(fmt.Sprintf("flood-%d", i), "A", 50, uint64(i), now))
	}
	tasks = append(tasks, qt("late", "B", 50, 5000, now.Add(30*time.Second)))
	order := Order(tasks, now.Add(31*time.Second), DefaultQueueConfig())
	if order[0].ID != "flood-0" || order[1].ID != "late" {
		t.Fatalf("the other submitter's task should be second, got %s,%s", order[0].ID, order[1].ID)
	}
}

// Starvation freedom: a priority-0 task competing with an endless stream of
// fresh priority-100 tasks (one placed per tick) reaches the head.
func TestQueueAgingPreventsStarvation(t *testing.T) {
	cfg := DefaultQueueConfig()
	low := qt("low", "A", 0, 0, now)
	clock := now
	var seq uint64 = 1
	for tick := 0; tick < 10_000; tick++ {
		queue := []QueuedTask{low}
		for i := 0; i < 5; i++ {
			queue = append(queue, qt(fmt.Sprintf("hi-%d", seq), "B", 100, seq, clock))
			seq++
		}
		if Order(queue, clock, cfg)[0].ID == "low" {
			bound := cfg.AgingGrace + time.Duration(100)*cfg.AgingInterval + time.Second
			if waited := clock.Sub(now); waited > bound {
				t.Fatalf("placed after %v, beyond the bound %v", waited, bound)
			}
			return
		}
		clock = clock.Add(time.Second)
	}
	t.Fatal("a low-priority task starved")
}

func benchNodes(n int) []*Node {
	rng := rand.New(rand.NewPCG(1, 1))
	out := make([]*Node, n)
	for i := range out {
		nd := node(fmt.Sprintf("node-%05d", i), int64(1+rng.IntN(16)), rng.IntN(4))
		nd.Labels["zone"] = fmt.Sprint("z", rng.IntN(4))
		if rng.IntN(2) == 0 {
			nd.Labels["disk"] = "ssd"
		}
		nd.Weight = 50 + rng.IntN(100)
		out[i] = nd
	}
	return out
}

func BenchmarkSelect(b *testing.B) {
	for _, n := range []int{100, 1_000, 10_000} {
		nodes := benchNodes(n)
		req := seedRequest()
		req.RequiredLabels = map[string]string{"zone": "z1"}
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Select(nodes, req, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkExplain(b *testing.B) {
	nodes := benchNodes(1000)
	req := seedRequest()
	b.ReportAllocs()
	for b.Loop() {
		Explain(nodes, req, nil)
	}
}

// BenchmarkSummarize is BenchmarkExplain's work when only the summary is
// wanted, as in a scheduling pass.
func BenchmarkSummarize(b *testing.B) {
	nodes := benchNodes(1000)
	req := seedRequest()
	b.ReportAllocs()
	for b.Loop() {
		Summarize(nodes, req)
	}
}

func BenchmarkOrder(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		rng := rand.New(rand.NewPCG(2, 2))
		tasks := make([]QueuedTask, n)
		for i := range tasks {
			tasks[i] = qt(fmt.Sprint(i), fmt.Sprint("s", rng.IntN(20)), rng.IntN(101), uint64(i), now.Add(-time.Duration(rng.IntN(600))*time.Second))
		}
		b.Run(fmt.Sprintf("pending=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Order(tasks, now, DefaultQueueConfig())
			}
		})
	}
}

// Head is Order's prefix, for any backlog and any k: same tasks, same
// order (priorities, failures, aging, backoff and submitters drawn at
// random, with shared Seqs as batch submits produce).
func TestHeadIsOrderPrefix(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := DefaultQueueConfig()
		cfg.AgingGrace = time.Duration(rapid.IntRange(0, 120).Draw(rt, "grace")) * time.Second
		n := rapid.IntRange(0, 300).Draw(rt, "n")
		tasks := make([]QueuedTask, n)
		for i := range tasks {
			tasks[i] = QueuedTask{
				ID:        fmt.Sprintf("t%03d", i),
				Priority:  rapid.SampledFrom([]int{0, 10, 50, 50, 50, 100}).Draw(rt, "prio"),
				Submitter: rapid.SampledFrom([]string{"a", "b", "c", "d"}).Draw(rt, "sub"),
				QueuedAt:  now.Add(-time.Duration(rapid.IntRange(0, 1200).Draw(rt, "age")) * time.Second),
				Seq:       uint64(rapid.IntRange(1, 60).Draw(rt, "seq")),
				Failures:  rapid.IntRange(0, 2).Draw(rt, "failures"),
			}
			if rapid.IntRange(0, 9).Draw(rt, "backoff") == 0 {
				tasks[i].NotBefore = now.Add(time.Minute)
			}
		}
		k := rapid.IntRange(1, n+5).Draw(rt, "k")
		want := Order(tasks, now, cfg)
		want = want[:min(k, len(want))]
		got := Head(tasks, now, cfg, k)
		if len(got) != len(want) {
			rt.Fatalf("Head returned %d tasks, Order's prefix has %d", len(got), len(want))
		}
		for i := range want {
			if got[i].ID != want[i].ID {
				rt.Fatalf("position %d: Head has %s, Order has %s", i, got[i].ID, want[i].ID)
			}
		}
	})
}

func BenchmarkHead(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		rng := rand.New(rand.NewPCG(2, 2))
		tasks := make([]QueuedTask, n)
		for i := range tasks {
			tasks[i] = qt(fmt.Sprint(i), fmt.Sprint("s", rng.IntN(20)), rng.IntN(101), uint64(i), now.Add(-time.Duration(rng.IntN(600))*time.Second))
		}
		for _, k := range []int{512, 4096} {
			b.Run(fmt.Sprintf("pending=%d/k=%d", n, k), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					Head(tasks, now, DefaultQueueConfig(), k)
				}
			})
		}
	}
}

// A Placer answers exactly as Select does while the caller books the
// chosen nodes, across interleaved requirement classes, per-task state
// and the profile score; its summaries are Summarize's at every step.
func TestPlacerMatchesSelect(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 40).Draw(rt, "nodes")
		nodes := make([]*Node, n)
		for i := range nodes {
			nd := node(fmt.Sprintf("n%02d", i), int64(rapid.IntRange(1, 8).Draw(rt, "cores")), rapid.IntRange(0, 3).Draw(rt, "busy"))
			nd.Slots = rapid.IntRange(1, 6).Draw(rt, "slots")
			nd.Weight = rapid.SampledFrom([]int{0, 50, 100, 150}).Draw(rt, "weight")
			if rapid.Bool().Draw(rt, "ssd") {
				nd.Labels["disk"] = "ssd"
			}
			if rapid.Bool().Draw(rt, "runtime") {
				nd.Capabilities = maps.Clone(nd.Capabilities)
				nd.Capabilities["oci"] = []string{DriverCapabilityVersion}
			}
			nd.Labels["zone"] = rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "zone")
			nd.Tier = Tier(rapid.IntRange(0, 3).Draw(rt, "tier"))
			nd.Profile.Power = rapid.Float64Range(0, 1).Draw(rt, "power")
			nd.Profile.Health = rapid.Float64Range(0, 1).Draw(rt, "health")
			if rapid.Bool().Draw(rt, "holds") {
				nd.Profile.Datasets = []Dataset{{Name: "cam", Bytes: int64(rapid.IntRange(1, 1000).Draw(rt, "bytes"))}}
			}
			if rapid.Bool().Draw(rt, "history") {
				nd.Profile.Classes = []ClassTime{{Class: "infer", EWMAMillis: int64(rapid.IntRange(1, 1000).Draw(rt, "ewma"))}}
			}
			nodes[i] = nd
		}
		var cfg *Config
		if rapid.Bool().Draw(rt, "profile") {
			cfg = &Config{ProfileScale: 100_000, ProfileWeights: DefaultProfileWeights()}
			if rapid.Bool().Draw(rt, "random") {
				cfg.RandomTopK = rapid.IntRange(2, 4).Draw(rt, "k")
				cfg.SpreadWindow = int64(rapid.SampledFrom([]int{0, 20_000, 200_000}).Draw(rt, "window"))
			}
		}
		p := NewPlacer(nodes, cfg)
		steps := rapid.IntRange(1, 80).Draw(rt, "steps")
		for s := 0; s < steps; s++ {
			req := seedRequest()
			req.Resources = Resources{CPUMillis: int64(rapid.SampledFrom([]int{250, 1000, 2000}).Draw(rt, "cpu"))}
			if rapid.Bool().Draw(rt, "zoned") {
				req.RequiredLabels = map[string]string{"zone": "a"}
			}
			if rapid.Bool().Draw(rt, "sized") {
				req.Size, req.Tiers = "medium", []Tier{TierL1, TierL2}
			}
			if rapid.Bool().Draw(rt, "inputs") {
				req.Inputs = []Input{{Name: "cam", Bytes: 500}}
			}
			if rapid.Bool().Draw(rt, "container") {
				req.Driver = "oci"
			}
			if rapid.Bool().Draw(rt, "class") {
				req.Class, req.ClassMedianMillis = "infer", 100
			}
			req.Seed = rapid.Uint64().Draw(rt, "seed")
			if rapid.IntRange(0, 9).Draw(rt, "failed") == 0 && n > 0 {
				req.FailedOn = map[string]int{nodes[rapid.IntRange(0, n-1).Draw(rt, "on")].ID: 1}
			}
			if rapid.IntRange(0, 9).Draw(rt, "blacklisted") == 0 && n > 0 {
				req.Blacklist = map[string]bool{nodes[rapid.IntRange(0, n-1).Draw(rt, "on")].ID: true}
			}
			if got, _ := p.Summarize(req); got != Summarize(nodes, req) {
				rt.Fatalf("step %d: placer summarizes %q, Summarize %q", s, got, Summarize(nodes, req))
			}
			want, wantErr := Select(nodes, req, cfg)
			got, gotErr := p.Select(req)
			if (wantErr == nil) != (gotErr == nil) || (wantErr == nil && (got.Node != want.Node || got.Score != want.Score)) {
				rt.Fatalf("step %d: placer chose %v (%v), Select chose %v (%v)", s, got, gotErr, want, wantErr)
			}
			if wantErr == nil && rapid.IntRange(0, 3).Draw(rt, "book") > 0 {
				p.Book(want.Node, req.Resources)
			}
		}
	})
}

func BenchmarkPlacer(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			nodes := benchNodes(n)
			for _, nd := range nodes {
				nd.Slots = 1 << 30
				nd.Resources.CPUMillis = 1 << 40
			}
			req := seedRequest()
			p := NewPlacer(nodes, nil)
			b.ReportAllocs()
			for b.Loop() {
				c, err := p.Select(req)
				if err != nil {
					b.Fatal(err)
				}
				p.Book(c.Node, req.Resources)
			}
		})
	}
}

// A Queue's head is Order's prefix over the tasks it holds, through any
// sequence of puts, replacements and removals, and a clock that may step
// back (backing-off tasks return to waiting).
func TestQueueHeadIsOrderPrefix(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := DefaultQueueConfig()
		cfg.AgingGrace = time.Duration(rapid.IntRange(0, 120).Draw(rt, "grace")) * time.Second
		cfg.AgingInterval = time.Duration(rapid.SampledFrom([]int{0, 1, 10}).Draw(rt, "interval")) * time.Second
		cfg.AgingCap = rapid.SampledFrom([]int{0, 3, 100}).Draw(rt, "cap")
		q := NewQueue(cfg)
		model := map[string]QueuedTask{}
		clock := now
		for step := range rapid.IntRange(1, 60).Draw(rt, "steps") {
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0, 1, 2, 3, 4: // put (new or replacing)
				tk := QueuedTask{
					ID:        fmt.Sprintf("t%02d", rapid.IntRange(0, 40).Draw(rt, "id")),
					Priority:  rapid.SampledFrom([]int{0, 10, 50, 50, 100}).Draw(rt, "prio"),
					Submitter: rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "sub"),
					QueuedAt: clock.Add(-time.Duration(rapid.IntRange(0, 1500).Draw(rt, "age"))*time.Second +
						time.Duration(rapid.IntRange(0, 2_999_999).Draw(rt, "ns"))),
					Seq:      uint64(rapid.IntRange(1, 30).Draw(rt, "seq")),
					Failures: rapid.IntRange(0, 2).Draw(rt, "failures"),
				}
				if rapid.IntRange(0, 3).Draw(rt, "backoff") == 0 {
					tk.NotBefore = clock.Add(time.Duration(rapid.IntRange(-30, 60).Draw(rt, "due")) * time.Second)
				}
				q.Put(tk)
				model[tk.ID] = tk
			case 5, 6: // remove
				id := fmt.Sprintf("t%02d", rapid.IntRange(0, 40).Draw(rt, "id"))
				_, had := model[id]
				if got := q.Remove(id); got != had {
					rt.Fatalf("step %d: Remove(%s) = %v, the queue should have held it: %v", step, id, got, had)
				}
				delete(model, id)
			default: // read the head, the clock moved (sometimes back)
				clock = clock.Add(time.Duration(rapid.IntRange(-20, 200).Draw(rt, "tick")) * time.Second)
				all := make([]QueuedTask, 0, len(model))
				for _, tk := range model {
					all = append(all, tk)
				}
				want := Order(all, clock, cfg)
				k := rapid.IntRange(1, len(model)+3).Draw(rt, "k")
				want = want[:min(k, len(want))]
				got := q.Head(clock, k)
				if ids(got) != ids(want) {
					rt.Fatalf("step %d, k=%d: Queue.Head\n  %s\nOrder\n  %s", step, k, ids(got), ids(want))
				}
				// Each task comes back as it was put.
				for _, g := range got {
					m := model[g.ID]
					if g.Submitter != m.Submitter || g.Priority != m.Priority || g.Failures != m.Failures || g.Seq != m.Seq ||
						!g.QueuedAt.Equal(m.QueuedAt) || !g.NotBefore.Equal(m.NotBefore) {
						rt.Fatalf("step %d: the queue gave back %+v, it was put as %+v", step, g, m)
					}
				}
			}
			if q.Len() != len(model) {
				rt.Fatalf("step %d: Len %d, want %d", step, q.Len(), len(model))
			}
			// The oldest task's millisecond, put, replaced and removed alike.
			var oldest time.Time
			for _, tk := range model {
				if oldest.IsZero() || tk.QueuedAt.Before(oldest) {
					oldest = tk.QueuedAt
				}
			}
			if !oldest.IsZero() {
				oldest = time.UnixMilli(floorDiv(oldest.UnixNano(), int64(time.Millisecond))).UTC()
			}
			if got := q.OldestQueuedAt(); !got.Equal(oldest) {
				rt.Fatalf("step %d: OldestQueuedAt %v, want %v", step, got, oldest)
			}
		}
	})
}

// Skipping a submitter while reading leaves its remaining tasks out and
// every other task where it was: the reading is the full order with the
// skipped submitters' later tasks removed, through several levels of
// aging and submitters skipped at any point.
func TestQueueIterSkipKeepsTheOthersOrder(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := DefaultQueueConfig()
		cfg.AgingInterval = time.Duration(rapid.SampledFrom([]int{0, 1, 10}).Draw(rt, "interval")) * time.Second
		cfg.AgingCap = rapid.SampledFrom([]int{0, 3, 100}).Draw(rt, "cap")
		q := NewQueue(cfg)
		n := rapid.IntRange(0, 80).Draw(rt, "tasks")
		for i := range n {
			tk := qt(fmt.Sprintf("t%02d", i), rapid.SampledFrom([]string{"a", "b", "c", "d"}).Draw(rt, "sub"),
				rapid.SampledFrom([]int{0, 50, 50, 100}).Draw(rt, "prio"), uint64(rapid.IntRange(1, 40).Draw(rt, "seq")),
				now.Add(-time.Duration(rapid.IntRange(0, 600).Draw(rt, "age"))*time.Second))
			tk.Ref = i
			q.Put(tk)
		}
		var full []QueuedTask
		for it := q.Iter(now); ; {
			tk, ok := it.Next()
			if !ok {
				break
			}
			full = append(full, tk)
		}
		skipped := map[string]bool{}
		it := q.Iter(now)
		for i := 0; ; {
			if rapid.IntRange(0, 5).Draw(rt, "skip?") == 0 {
				sub := rapid.SampledFrom([]string{"a", "b", "c", "d", "nobody"}).Draw(rt, "skip")
				skipped[sub] = true
				it.Skip(sub)
			}
			for i < len(full) && skipped[full[i].Submitter] {
				i++
			}
			got, ok := it.Next()
			if i == len(full) {
				if ok {
					rt.Fatalf("read %s after the end of the order", got.ID)
				}
				break
			}
			if !ok || got.ID != full[i].ID {
				rt.Fatalf("read %q (%v), want %s; full order %s, skipped %v", got.ID, ok, full[i].ID, ids(full), skipped)
			}
			if ref, held := q.Ref(got.ID); !held || ref != got.Ref {
				rt.Fatalf("Ref(%s) = %v, %v; it was put with %v", got.ID, ref, held, got.Ref)
			}
			i++
		}
	})
	if _, held := NewQueue(DefaultQueueConfig()).Ref("none"); held {
		t.Fatal("an empty queue holds a task")
	}
}

func BenchmarkQueueHead(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		rng := rand.New(rand.NewPCG(2, 2))
		q := NewQueue(DefaultQueueConfig())
		for i := range n {
			q.Put(qt(fmt.Sprint(i), fmt.Sprint("s", rng.IntN(20)), rng.IntN(101), uint64(i), now.Add(-time.Duration(rng.IntN(600))*time.Second)))
		}
		for _, k := range []int{512, 4096} {
			b.Run(fmt.Sprintf("pending=%d/k=%d", n, k), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					q.Head(now, k)
				}
			})
		}
	}
}

// BenchmarkQueueFootprint reports what the leader's queue holds per
// pending task (its entry, the id map and the trees), ids and the
// caller's records left out: tasks arrive in submission order, a few
// submitters, as a backlog loads.
func BenchmarkQueueFootprint(b *testing.B) {
	const tasks = 100_000
	ids := make([]string, tasks)
	refs := make([]*int, tasks)
	for i := range ids {
		ids[i], refs[i] = fmt.Sprintf("01kb%022d", i), new(int)
	}
	for b.Loop() {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		q := NewQueue(DefaultQueueConfig())
		for i, id := range ids {
			q.Put(QueuedTask{ID: id, Submitter: fmt.Sprint("team-", i%4), Priority: 50, Seq: uint64(i/256 + 1), QueuedAt: now, Ref: refs[i]})
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/tasks, "heap-bytes/task")
		runtime.KeepAlive(q)
	}
}

// The yes/no filter (checks reordered by cost) agrees with the filter that
// lists reasons, for any node and request.
// drawNode draws a node for which each check passes more often than
// not, so that runs where all pass but one are common.
func drawNode(rt *rapid.T, id string) *Node {
	caps := map[string][]string{"exec": {rapid.SampledFrom([]string{"1", "1", "1", "2"}).Draw(rt, "capv")}}
	if rapid.Bool().Draw(rt, "oci") {
		caps["oci"] = []string{"1"}
	}
	return &Node{
		ID:              id,
		Management:      rapid.SampledFrom([]Management{ManagementActive, ManagementActive, ManagementActive, ManagementDraining}).Draw(rt, "mgmt"),
		Liveness:        rapid.SampledFrom([]Liveness{LivenessReady, LivenessReady, LivenessReady, LivenessDown}).Draw(rt, "live"),
		Scheduling:      rapid.SampledFrom([]Scheduling{SchedulingEligible, SchedulingEligible, SchedulingEligible, SchedulingIneligible}).Draw(rt, "sched"),
		LastHeartbeat:   now.Add(-time.Duration(rapid.IntRange(0, 80).Draw(rt, "hbAge")) * time.Second),
		Capabilities:    caps,
		Labels:          map[string]string{"zone": rapid.SampledFrom([]string{"a", "a", "a", "b"}).Draw(rt, "zone")},
		Resources:       drawResources(rt, "have", 2, 3),
		Reserved:        drawResources(rt, "reserved", 0, 1),
		Slots:           rapid.IntRange(1, 4).Draw(rt, "slots"),
		RunningAttempts: rapid.IntRange(0, 2).Draw(rt, "running"),
		Condition:       rapid.SampledFrom([]string{"", "", "", "disk_full: 3 MiB free"}).Draw(rt, "condition"),
		Probation:       rapid.SampledFrom([][]string{nil, nil, nil, {"*"}, {"=infer"}, {"+new"}, {"!"}, {"*", "=clean"}}).Draw(rt, "probation"),
	}
}

func drawResources(rt *rapid.T, label string, lo, hi int) Resources {
	return Resources{
		CPUMillis: int64(rapid.IntRange(lo, hi).Draw(rt, label+"cpu")) * 1000, MemoryMB: int64(rapid.IntRange(lo, hi).Draw(rt, label+"mem")) * 1024,
		GPU: int64(rapid.IntRange(lo, hi).Draw(rt, label+"gpu")), DiskMB: int64(rapid.IntRange(lo, hi).Draw(rt, label+"disk")),
	}
}

// drawRequest draws a request that the nodes drawNode makes (ids n0, n1,
// ...) mostly pass.
func drawRequest(rt *rapid.T) *Request {
	req := &Request{
		Class:      rapid.SampledFrom([]string{"", "infer", "clean"}).Draw(rt, "class"),
		Capability: rapid.SampledFrom([]string{"", "exec", "gpu"}).Draw(rt, "cap"), CapabilityVersion: "1",
		Resources: drawResources(rt, "want", 0, 2), Now: now, HeartbeatTTL: time.Duration(rapid.IntRange(0, 90).Draw(rt, "ttl")) * time.Second,
		Driver: rapid.SampledFrom([]string{"", "", "oci"}).Draw(rt, "driver"),
	}
	if rapid.Bool().Draw(rt, "required") {
		req.RequiredLabels = map[string]string{"zone": "a"}
	}
	if rapid.IntRange(0, 3).Draw(rt, "blacklisted") == 0 {
		req.Blacklist = map[string]bool{"n1": true}
	}
	if rapid.IntRange(0, 3).Draw(rt, "passedOver") == 0 {
		req.PassedOver = map[string]string{"n1": "asleep"}
	}
	return req
}

// A node whose agent reports a problem takes no new attempt, and the
// explanation says what the agent reported.
func TestAgentConditionKeepsNewWorkAway(t *testing.T) {
	full := &Node{ID: "full", Management: ManagementActive, Liveness: LivenessReady, Scheduling: SchedulingEligible,
		Resources: Resources{CPUMillis: 1000, MemoryMB: 1024}, Slots: 2, Condition: "disk_full: 3 MiB free on the data directory"}
	fine := *full
	fine.ID, fine.Condition = "fine", ""
	req := &Request{TaskID: "t", Now: now}
	if Eligible(full, req) || !Eligible(&fine, req) {
		t.Fatalf("Eligible: full %v, fine %v", Eligible(full, req), Eligible(&fine, req))
	}
	reasons := Check(full, req)
	if len(reasons) != 1 || reasons[0].Code != ReasonAgentCondition || reasons[0].Detail != full.Condition {
		t.Fatalf("reasons for the full node: %+v", reasons)
	}
}

// Eligible and Check code the same rules two ways (see Check): on random
// nodes and requests, Eligible holds exactly when Check finds no reason.
func TestEligibleAgreesWithCheck(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n, req := drawNode(rt, "n1"), drawRequest(rt)
		reasons := Check(n, req)
		if got := Eligible(n, req); got != (len(reasons) == 0) {
			rt.Fatalf("Eligible says %v, Check lists %v", got, reasons)
		}
	})
}

// Summarize is the summary Explain writes, without the per-node list.
func TestSummarizeIsExplainsSummary(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var nodes []*Node
		for i := range rapid.IntRange(0, 6).Draw(rt, "nodes") {
			nodes = append(nodes, drawNode(rt, fmt.Sprint("n", i)))
		}
		req := drawRequest(rt)
		if got, want := Summarize(nodes, req), Explain(nodes, req, nil).Summary; got != want {
			rt.Fatalf("Summarize says %q, Explain %q", got, want)
		}
	})
}

// A leader holds one queue entry per pending task: keep it in the 64-byte
// size class (48 bytes of its own and the 16 of the caller's reference,
// which spares a pass a lookup per task it places).
func TestQueueEntryStaysSmall(t *testing.T) {
	if size := unsafe.Sizeof(queueEntry{}); size > 64 {
		t.Fatalf("queueEntry is %d bytes, want at most 64", size)
	}
}

// A task with a driver needs a node advertising it: the reason names the
// capability, so a wait on nodes without a container runtime explains
// itself.
func TestDriverNeedsItsCapability(t *testing.T) {
	bare := &Node{ID: "bare", Management: ManagementActive, Liveness: LivenessReady, Scheduling: SchedulingEligible,
		Resources: Resources{CPUMillis: 1000, MemoryMB: 1024}, Slots: 2, Capabilities: map[string][]string{"exec": {"1"}}}
	oci := *bare
	oci.ID, oci.Capabilities = "oci", map[string][]string{"exec": {"1"}, "oci": {"1"}}
	req := &Request{TaskID: "t", Now: now, Capability: "exec", CapabilityVersion: "1", Driver: "oci"}
	if Eligible(bare, req) || !Eligible(&oci, req) {
		t.Fatalf("Eligible: bare %v, oci %v", Eligible(bare, req), Eligible(&oci, req))
	}
	reasons := Check(bare, req)
	if len(reasons) != 1 || reasons[0].Code != ReasonMissingCapability || reasons[0].Summary != "missing capability oci@1" {
		t.Fatalf("reasons for the node without a runtime: %+v", reasons)
	}
	if s := Summarize([]*Node{bare, &oci}, req); !strings.Contains(s, "1/2 nodes eligible") || !strings.Contains(s, "missing capability oci@1") {
		t.Fatalf("summary %q", s)
	}
}

// Every replica re-checks each reservation with Check when it applies it:
// a passing check with a request that has no labels allocates nothing, not
// even the request a caller keeps on its stack (a request reachable from
// the compiled rules made every caller's request escape to the heap).
func TestCheckOfAnEligibleNodeDoesNotAllocate(t *testing.T) {
	n := node("node-a", 4, 0)
	allocs := testing.AllocsPerRun(100, func() {
		req := Request{TaskID: "t1", Capability: "exec", CapabilityVersion: "1", Resources: Resources{CPUMillis: 1000}, Now: now, HeartbeatTTL: time.Minute}
		if reasons := Check(n, &req); len(reasons) != 0 {
			t.Fatalf("node-a refused: %v", reasons)
		}
	})
	if allocs != 0 {
		t.Fatalf("a passing Check allocates %.0f times, want 0", allocs)
	}
}

// A retry never returns to the node where the task failed while another
// node fits, whatever its preferred labels (two of them here), with the
// deterministic and the random choice alike; when no other node fits it
// goes back there.
func TestRetryAvoidsTheFailedNodeWhateverThePreferences(t *testing.T) {
	pref := node("pref", 4, 0)
	pref.Labels = map[string]string{"disk": "ssd", "zone": "a"}
	other := node("other", 4, 7)
	other.Weight = 1
	req := &Request{
		TaskID: "t1", Capability: "exec", CapabilityVersion: "1",
		PreferredLabels: map[string]string{"disk": "ssd", "zone": "a"},
		Resources:       Resources{CPUMillis: 1000}, Now: now,
		FailedOn: map[string]int{"pref": 1},
	}
	for _, cfg := range []*Config{nil, {RandomTopK: 3}, {RandomTopK: 3, SpreadWindow: 20_000, ProfileScale: 100_000, ProfileWeights: DefaultProfileWeights()}} {
		for seed := uint64(0); seed < 64; seed++ {
			req.Seed = seed
			got, err := Select([]*Node{pref, other}, req, cfg)
			if err != nil || got.Node.ID != "other" {
				t.Fatalf("cfg %+v seed %d: retry placed on %v (%v)", cfg, seed, got.Node, err)
			}
		}
		if ranked := Rank([]*Node{pref, other}, req, cfg); ranked[0].Node.ID != "other" {
			t.Fatalf("cfg %+v: ranked %s first", cfg, ranked[0].Node.ID)
		}
		full := node("other", 4, 8)
		if got, err := Select([]*Node{pref, full}, req, cfg); err != nil || got.Node.ID != "pref" {
			t.Fatalf("cfg %+v: with no other node free, the retry should go back: %v (%v)", cfg, got.Node, err)
		}
	}
}

// A missing capability's detail names what the node lacks.
func TestMissingCapabilityDetailNamesIt(t *testing.T) {
	n := node("n", 4, 0)
	req := &Request{Capability: "gpu-infer", CapabilityVersion: "2", Now: now}
	rs := Check(n, req)
	if len(rs) != 1 || rs[0].String() != "missing capability gpu-infer@2 (node has no gpu-infer at any version)" {
		t.Fatalf("reasons %v", rs)
	}
	n.Capabilities["gpu-infer"] = []string{"1"}
	if rs := Check(n, req); len(rs) != 1 || rs[0].String() != "missing capability gpu-infer@2 (node has gpu-infer@1)" {
		t.Fatalf("reasons %v", rs)
	}
}

// A node on probation: "*" takes one attempt at a time and "!" (awaiting
// its check) none (rules); a node held ("=NAME" from a class, "+new" from
// classes its history lacks) is chosen only when no other node fits, and
// never refused outright.
func TestProbation(t *testing.T) {
	req := func(class string) *Request {
		return &Request{Class: class, Capability: "exec", CapabilityVersion: "1", Resources: Resources{CPUMillis: 100}, Now: now}
	}
	n := node("n", 4, 0)
	n.Weight = 1000 // it would win on score
	n.Profile.Classes = []ClassTime{{Class: "clean", EWMAMillis: 1000}}
	other := node("other", 4, 0)
	for _, c := range []struct {
		probation []string
		class     string
		avoided   bool
	}{
		{[]string{"=infer"}, "infer", true},
		{[]string{"=infer"}, "clean", false},
		{[]string{"+new"}, "fresh", true},
		{[]string{"+new"}, "clean", false},
		{[]string{"*"}, "clean", false},
		{[]string{"*", "=infer"}, "infer", true},
	} {
		n.Probation = c.probation
		for _, cfg := range []*Config{nil, {RandomTopK: 3}} {
			got, err := Select([]*Node{n, other}, req(c.class), cfg)
			// A random draw may choose either node when neither is avoided.
			if err != nil || (got.Node.ID == "other") != c.avoided && (cfg == nil || c.avoided) {
				t.Errorf("probation %v, class %s: chose %v (%v), avoided want %v", c.probation, c.class, got.Node, err, c.avoided)
			}
			if got, err := Select([]*Node{n}, req(c.class), cfg); err != nil || got.Node.ID != "n" {
				t.Errorf("probation %v, class %s, no other node: %v (%v)", c.probation, c.class, got.Node, err)
			}
		}
		if !Eligible(n, req(c.class)) {
			t.Errorf("probation %v refuses class %s outright", c.probation, c.class)
		}
	}
	n.Probation, n.RunningAttempts = []string{"*"}, 1
	if rs := Check(n, req("clean")); len(rs) != 1 || rs[0].Code != ReasonProbation {
		t.Fatalf("one at a time: %v", rs)
	}
	n.Probation, n.RunningAttempts = []string{"!"}, 0
	if rs := Check(n, req("clean")); len(rs) != 1 || rs[0].Code != ReasonProbation || Eligible(n, req("clean")) {
		t.Fatalf("awaiting its check: %v", rs)
	}
}
