// Package sim is the judgement simulator: a deterministic, seeded fleet
// of simulated nodes, some of them bad in known ways, running a simulated
// workload through the real scheduler and the real FSM (profiles, tiers,
// quarantines, blame, slow attempts) on a simulated clock, with no
// process, socket or disk. It scores every judgement the cluster made
// against the truth it injected: nodes rightly and wrongly quarantined or
// demoted, black holes missed, how fast each was caught and how many
// attempts it ate, hung attempts flagged, tasks blamed, and the makespan
// against an oracle that never places work on a bad node.
//
// A scenario is a JSON file (see Scenario), so a site can describe its
// own fleet and workload and ask what a set of profile settings would
// have done with it.
package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Node kinds: what a simulated node truly is.
const (
	// KindHealthy runs everything at its speed.
	KindHealthy = "healthy"
	// KindSlow runs everything at a fraction of the fleet's speed.
	KindSlow = "slow"
	// KindBlackHole fails every attempt within a second (it cannot start
	// a shell); its health check fails.
	KindBlackHole = "black_hole"
	// KindClassHole fails the attempts of one class fast (a missing
	// library); its health check passes.
	KindClassHole = "class_hole"
	// KindNewClassHole fails fast the attempts of every class it had not
	// run before its defect began (it cannot fetch what it lacks), and
	// runs those it had; its health check passes.
	KindNewClassHole = "new_class_hole"
	// KindHung never finishes an attempt: each runs to its timeout.
	KindHung = "hung"
	// KindFlapping loses its link for a while, again and again: it is
	// declared down (its attempts reclaimed) and registers again.
	KindFlapping = "flapping"
)

// bad reports whether a kind is one the cluster should keep work off
// (quarantine or demote); slow and flapping nodes are merely weaker.
func bad(kind string) bool {
	switch kind {
	case KindBlackHole, KindClassHole, KindNewClassHole, KindHung:
		return true
	}
	return false
}

// Duration is a time.Duration written as Go writes one ("90s", "2h").
type Duration time.Duration

// MarshalJSON writes the duration as text.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads "90s", "2h30m".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"90s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// NodeGroup is Count nodes of one kind.
type NodeGroup struct {
	Count int    `json:"count"`
	Kind  string `json:"kind"`
	// Cores and MemoryMB size each node (tiers follow them); Slots is
	// how many attempts it runs at once (its cores by default).
	Cores    int   `json:"cores"`
	MemoryMB int64 `json:"memory_mb"`
	Slots    int   `json:"slots,omitempty"`
	// Speed multiplies how fast it runs work (1: the fleet's norm). A
	// slow node's default is 0.3.
	Speed float64 `json:"speed,omitempty"`
	// Class is the class a class_hole fails.
	Class string `json:"class,omitempty"`
	// OnsetWithin: each node's defect begins at a random time within it,
	// the node healthy before (a node that goes bad in the field); 0:
	// from the start.
	OnsetWithin Duration `json:"onset_within,omitempty"`
}

// Class is a kind of work: its run time on a node of speed 1, and its
// share of the arrivals.
type Class struct {
	Name   string   `json:"name"`
	Median Duration `json:"median"`
	Share  float64  `json:"share"`
}

// Scenario is a fleet, a workload and the truths injected into them.
type Scenario struct {
	Name string `json:"name"`
	Seed uint64 `json:"seed"`
	// Duration is how long tasks arrive; the simulation runs until the
	// last of them is done (or Drain more has passed).
	Duration Duration    `json:"duration"`
	Drain    Duration    `json:"drain,omitempty"`
	Nodes    []NodeGroup `json:"nodes"`
	Classes  []Class     `json:"classes"`
	// ArrivalsPerMinute is the mean rate of task arrivals (Poisson).
	ArrivalsPerMinute float64 `json:"arrivals_per_minute"`
	// BadTaskShare of the tasks fail fast wherever they run;
	// SmallFailShare fail only on nodes under 4 cores; NewClassShare
	// belong to a class never seen before (a new one every
	// NewClassEvery).
	BadTaskShare   float64  `json:"bad_task_share,omitempty"`
	SmallFailShare float64  `json:"small_fail_share,omitempty"`
	NewClassShare  float64  `json:"new_class_share,omitempty"`
	NewClassEvery  Duration `json:"new_class_every,omitempty"`
	// SpeculativeShare of the tasks are speculative: a backup starts on
	// another node once an attempt is marked slow.
	SpeculativeShare float64 `json:"speculative_share,omitempty"`
	// MaxAttempts of every task (3 by default).
	MaxAttempts int `json:"max_attempts,omitempty"`
	// FlapEvery and FlapFor: a flapping node goes down every FlapEvery
	// for FlapFor (30 min and 2 min by default).
	FlapEvery Duration `json:"flap_every,omitempty"`
	FlapFor   Duration `json:"flap_for,omitempty"`
}

// Validate checks a scenario and fills its defaults.
func (s *Scenario) Validate() error {
	var bad []string
	check := func(ok bool, msg string, args ...any) {
		if !ok {
			bad = append(bad, fmt.Sprintf(msg, args...))
		}
	}
	check(s.Duration > 0, "duration must be positive")
	check(s.ArrivalsPerMinute > 0, "arrivals_per_minute must be positive")
	check(len(s.Nodes) > 0, "nodes: at least one group")
	check(len(s.Classes) > 0, "classes: at least one")
	total := 0
	for i := range s.Nodes {
		g := &s.Nodes[i]
		total += g.Count
		check(g.Count >= 0, "nodes[%d]: count must not be negative", i)
		switch g.Kind {
		case KindHealthy, KindSlow, KindBlackHole, KindClassHole, KindNewClassHole, KindHung, KindFlapping:
		default:
			bad = append(bad, fmt.Sprintf("nodes[%d]: kind %q is not one of healthy, slow, black_hole, class_hole, new_class_hole, hung, flapping", i, g.Kind))
		}
		check(g.Kind != KindClassHole || g.Class != "", "nodes[%d]: a class_hole names its class", i)
		if g.Cores <= 0 {
			g.Cores = 4
		}
		if g.MemoryMB <= 0 {
			g.MemoryMB = 8192
		}
		if g.Slots <= 0 {
			g.Slots = g.Cores
		}
		if g.Speed <= 0 {
			g.Speed = 1
			if g.Kind == KindSlow {
				g.Speed = 0.3
			}
		}
	}
	check(total > 0 && total <= 20000, "nodes: 1 to 20000 in all, not %d", total)
	var share float64
	for i, c := range s.Classes {
		check(c.Name != "" && !strings.HasPrefix(c.Name, freshPrefix), "classes[%d]: a name, not starting with %q", i, freshPrefix)
		check(c.Median > 0 && c.Share > 0, "classes[%d]: median and share must be positive", i)
		share += c.Share
	}
	check(share > 0, "classes: the shares must add up to more than 0")
	for _, f := range []float64{s.BadTaskShare, s.SmallFailShare, s.NewClassShare} {
		check(f >= 0 && f < 1, "shares of bad, small-fail and new-class tasks must be in [0, 1)")
	}
	check(s.SpeculativeShare >= 0 && s.SpeculativeShare <= 1, "speculative_share must be in [0, 1]")
	check(s.NewClassShare == 0 || s.NewClassEvery > 0, "new_class_every must be positive with a new_class_share")
	if s.MaxAttempts <= 0 {
		s.MaxAttempts = 3
	}
	if s.Drain <= 0 {
		s.Drain = Duration(2 * time.Hour)
	}
	if s.FlapEvery <= 0 {
		s.FlapEvery = Duration(30 * time.Minute)
	}
	if s.FlapFor <= 0 {
		s.FlapFor = Duration(2 * time.Minute)
	}
	if len(bad) > 0 {
		return errors.New("scenario: " + strings.Join(bad, "; "))
	}
	return nil
}

// freshPrefix names the classes never seen before the simulation began.
const freshPrefix = "fresh-"

// Load reads a scenario file.
func Load(path string) (Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Scenario{}, fmt.Errorf("read scenario: %w", err)
	}
	var s Scenario
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Scenario{}, fmt.Errorf("scenario %s: %w", path, err)
	}
	if err := s.Validate(); err != nil {
		return Scenario{}, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Mixed is the mixed fleet of the benchmark document: 200 nodes of mixed
// speed and size, among them slow ones, black holes of every sort, hung
// and flapping ones, under two hours of work with bad tasks, tasks that
// fail on small nodes and classes never seen before.
func Mixed() Scenario {
	return Scenario{
		Name: "mixed", Seed: 1, Duration: Duration(2 * time.Hour),
		Nodes: []NodeGroup{
			{Count: 100, Kind: KindHealthy, Cores: 4, MemoryMB: 8192},
			{Count: 50, Kind: KindHealthy, Cores: 2, MemoryMB: 4096, Speed: 0.7},
			{Count: 20, Kind: KindHealthy, Cores: 8, MemoryMB: 16384, Speed: 1.5},
			{Count: 10, Kind: KindSlow, Cores: 4, MemoryMB: 8192},
			{Count: 2, Kind: KindBlackHole, Cores: 4, MemoryMB: 8192},
			{Count: 2, Kind: KindBlackHole, Cores: 4, MemoryMB: 8192, OnsetWithin: Duration(time.Hour)},
			{Count: 3, Kind: KindClassHole, Cores: 4, MemoryMB: 8192, Class: "infer", OnsetWithin: Duration(time.Hour)},
			{Count: 3, Kind: KindNewClassHole, Cores: 4, MemoryMB: 8192, OnsetWithin: Duration(time.Hour)},
			{Count: 2, Kind: KindHung, Cores: 4, MemoryMB: 8192},
			{Count: 2, Kind: KindHung, Cores: 4, MemoryMB: 8192, OnsetWithin: Duration(time.Hour)},
			{Count: 6, Kind: KindFlapping, Cores: 2, MemoryMB: 4096},
		},
		Classes: []Class{
			{Name: "clean", Median: Duration(20 * time.Second), Share: 0.4},
			{Name: "infer", Median: Duration(45 * time.Second), Share: 0.3},
			{Name: "archive", Median: Duration(8 * time.Second), Share: 0.3},
		},
		ArrivalsPerMinute: 1200, BadTaskShare: 0.01, SmallFailShare: 0.01, SpeculativeShare: 0.5,
		NewClassShare: 0.05, NewClassEvery: Duration(10 * time.Minute),
	}
}

// Small is Mixed at the size CI runs: 30 nodes for 20 minutes.
func Small() Scenario {
	return Scenario{
		Name: "small", Seed: 1, Duration: Duration(20 * time.Minute),
		Nodes: []NodeGroup{
			{Count: 14, Kind: KindHealthy, Cores: 4, MemoryMB: 8192},
			{Count: 6, Kind: KindHealthy, Cores: 2, MemoryMB: 4096, Speed: 0.7},
			{Count: 2, Kind: KindSlow, Cores: 4, MemoryMB: 8192},
			{Count: 1, Kind: KindBlackHole, Cores: 4, MemoryMB: 8192},
			{Count: 1, Kind: KindBlackHole, Cores: 4, MemoryMB: 8192, OnsetWithin: Duration(10 * time.Minute)},
			{Count: 1, Kind: KindClassHole, Cores: 4, MemoryMB: 8192, Class: "infer", OnsetWithin: Duration(10 * time.Minute)},
			{Count: 1, Kind: KindNewClassHole, Cores: 4, MemoryMB: 8192},
			{Count: 1, Kind: KindHung, Cores: 4, MemoryMB: 8192},
			{Count: 1, Kind: KindHung, Cores: 4, MemoryMB: 8192, OnsetWithin: Duration(10 * time.Minute)},
			{Count: 2, Kind: KindFlapping, Cores: 2, MemoryMB: 4096},
		},
		Classes: []Class{
			{Name: "clean", Median: Duration(20 * time.Second), Share: 0.4},
			{Name: "infer", Median: Duration(45 * time.Second), Share: 0.3},
			{Name: "archive", Median: Duration(8 * time.Second), Share: 0.3},
		},
		ArrivalsPerMinute: 160, BadTaskShare: 0.01, SmallFailShare: 0.01, SpeculativeShare: 0.5,
		NewClassShare: 0.05, NewClassEvery: Duration(4 * time.Minute),
		FlapEvery: Duration(8 * time.Minute),
	}
}

// Builtin returns a built-in scenario by name.
func Builtin(name string) (Scenario, bool) {
	switch name {
	case "mixed":
		return Mixed(), true
	case "small":
		return Small(), true
	}
	return Scenario{}, false
}
