package scheduler

import (
	"strings"
	"testing"
)

func TestTierBelowSizeIsExplained(t *testing.T) {
	a, b := node("a", 4, 0), node("b", 4, 0)
	a.Tier, b.Tier = TierL3, TierL1
	req := seedRequest()
	req.PreferredLabels = nil
	req.Size, req.Tiers = "large", []Tier{TierL1}
	ex := Explain([]*Node{a, b}, req, nil)
	if ex.Summary != "1/2 nodes eligible: 1 tier L3 below size large" {
		t.Fatalf("summary %q", ex.Summary)
	}
	if got := Check(a, req); len(got) != 1 || got[0].Code != ReasonTierBelowSize {
		t.Fatalf("reasons %v", got)
	}
	if ex.Nodes[0].NodeID != "b" || ex.Nodes[0].Tier != "L1" || ex.Nodes[0].Parts == nil {
		t.Fatalf("the eligible node comes first with its tier and parts: %+v", ex.Nodes[0])
	}
	// A node not ranked yet is not held back.
	a.Tier = TierUnknown
	if !Eligible(a, req) {
		t.Fatal("an unranked node takes any size")
	}
}

func TestQuarantinedNodeTakesNothing(t *testing.T) {
	a := node("a", 4, 0)
	a.Quarantine = "suspected black hole: 3 fast failures of class build in a row"
	req := seedRequest()
	reasons := Check(a, req)
	if len(reasons) != 1 || reasons[0].Code != ReasonQuarantined || !strings.Contains(reasons[0].String(), "black hole") {
		t.Fatalf("reasons %v", reasons)
	}
	if Eligible(a, req) {
		t.Fatal("a quarantined node is not eligible")
	}
}

// Data gravity: a slower node holding most of a
// large input beats a faster node that would fetch it; without the data
// anywhere, the faster node wins.
func TestLocalityOutweighsPower(t *testing.T) {
	slow, fast := node("slow", 2, 0), node("fast", 8, 0)
	slow.Profile = Profile{Power: 0.25, Health: 1}
	fast.Profile = Profile{Power: 1, Health: 1}
	cfg := &Config{ProfileScale: 200_000, ProfileWeights: DefaultProfileWeights()}
	req := seedRequest()
	req.PreferredLabels = nil
	req.Resources = Resources{CPUMillis: 1000}
	req.Inputs = []Input{{Name: "video", Bytes: 3_500_000_000}}
	if got, _ := Select([]*Node{slow, fast}, req, cfg); got.Node.ID != "fast" {
		t.Fatalf("with the input nowhere the faster node wins, got %s", got.Node.ID)
	}
	slow.Profile.Datasets = []Dataset{{Name: "video", Bytes: 3_200_000_000}}
	if got, _ := Select([]*Node{slow, fast}, req, cfg); got.Node.ID != "slow" {
		t.Fatalf("the node holding the input wins, got %s", got.Node.ID)
	}
	if p := Parts(slow, req, cfg); p.Inputs != "holds 3.2 of 3.5 GB of inputs" {
		t.Fatalf("inputs text %q", p.Inputs)
	}
}

func TestHistoryFavoursTheFasterNodeOfAClass(t *testing.T) {
	a, b := node("a", 4, 0), node("b", 4, 0)
	a.Profile.Classes = []ClassTime{{Class: "infer", EWMAMillis: 3000}}
	b.Profile.Classes = []ClassTime{{Class: "infer", EWMAMillis: 1000}}
	cfg := &Config{ProfileScale: 200_000, ProfileWeights: DefaultProfileWeights()}
	req := seedRequest()
	req.PreferredLabels = nil
	req.Class, req.ClassMedianMillis = "infer", 1000
	if got, _ := Select([]*Node{a, b}, req, cfg); got.Node.ID != "b" {
		t.Fatalf("the node three times slower at the class loses, got %s", got.Node.ID)
	}
	if p := Parts(a, req, cfg); p.History < 0.33 || p.History > 0.34 {
		t.Fatalf("history part %f, want a third", p.History)
	}
	req.Class = "other"
	if p := Parts(a, req, cfg); p.History != 1 {
		t.Fatalf("a class without history scores 1, got %f", p.History)
	}
}

// The spread window keeps the random choice among near-equals: a
// preferred label still decides.
func TestSpreadWindowKeepsPreferredLabelsDecisive(t *testing.T) {
	a, b, c := node("a", 4, 0), node("b", 4, 0), node("c", 4, 0)
	a.Labels["disk"] = "ssd"
	cfg := &Config{RandomTopK: 3, SpreadWindow: 50_000}
	for seed := uint64(0); seed < 100; seed++ {
		req := seedRequest()
		req.Seed = seed
		if got, _ := Select([]*Node{a, b, c}, req, cfg); got.Node.ID != "a" {
			t.Fatalf("seed %d: the node with the preferred label must win, got %s", seed, got.Node.ID)
		}
	}
	seen := map[string]bool{}
	for seed := uint64(0); seed < 100; seed++ {
		req := seedRequest()
		req.PreferredLabels = nil
		req.Seed = seed
		got, _ := Select([]*Node{a, b, c}, req, cfg)
		seen[got.Node.ID] = true
		again, _ := Select([]*Node{a, b, c}, req, cfg)
		if again.Node != got.Node {
			t.Fatal("the same seed must make the same choice")
		}
	}
	if len(seen) != 3 {
		t.Fatalf("equal nodes should all be chosen sometimes: %v", seen)
	}
}

// Once nodes have run a class, their observed speed at it, not the
// benchmark, makes the capacity part: a node whose benchmark flattered it
// (power 1) but which runs the class three times slower than the fleet
// loses to one with a poor benchmark (power 0.2) that runs it at the
// fleet's median; for a class neither ran, the benchmark decides.
func TestObservedRunTimesOutweighTheBenchmark(t *testing.T) {
	flattered, modest := node("flattered", 4, 0), node("modest", 4, 0)
	flattered.Profile = Profile{Power: 1, Health: 1, Classes: []ClassTime{{Class: "infer", EWMAMillis: 3000}}}
	modest.Profile = Profile{Power: 0.2, Health: 1, Classes: []ClassTime{{Class: "infer", EWMAMillis: 1000}}}
	cfg := &Config{ProfileScale: 200_000, ProfileWeights: DefaultProfileWeights()}
	req := seedRequest()
	req.PreferredLabels = nil
	req.Class, req.ClassMedianMillis = "infer", 1000
	if got, _ := Select([]*Node{flattered, modest}, req, cfg); got.Node.ID != "modest" {
		t.Fatalf("the node slow at the class won on its benchmark: %s", got.Node.ID)
	}
	pf, pm := Parts(flattered, req, cfg), Parts(modest, req, cfg)
	if pf.Capacity >= pm.Capacity {
		t.Fatalf("capacity %f (flattered) vs %f (modest): observed speed should decide", pf.Capacity, pm.Capacity)
	}
	req.Class, req.ClassMedianMillis = "new", 0
	if got, _ := Select([]*Node{flattered, modest}, req, cfg); got.Node.ID != "flattered" {
		t.Fatalf("for a class neither ran the benchmark decides: %s", got.Node.ID)
	}
}
