package scheduler

import (
	"cmp"
	"errors"
	"math"
	"slices"
	"strconv"
)

// DefaultWeight is a node's weight when none is set.
const DefaultWeight = 100

// Reference score terms (docs/scheduling.md, "The reference score"): a
// preferred label outweighs any weight, and each live attempt costs as
// much as 10 points of weight.
const (
	PreferredLabelPoints = 1_000_000
	WeightPoints         = 1_000
	RunningAttemptCost   = 10_000
	// RetryNodePenalty is subtracted per earlier failure of the task on a
	// node. It outweighs every other term, preferred labels included, so a
	// retry never returns to a node where the task failed or hung while
	// another node fits.
	RetryNodePenalty = 1_000_000_000_000
	// HibernatingPenalty makes an awake node win over a sleeping one with
	// the same preferred labels: waking a node costs seconds.
	HibernatingPenalty = 300_000
)

// ProfileWeights weigh the parts of the profile score.
type ProfileWeights struct {
	Capacity float64 `json:"capacity"`
	Health   float64 `json:"health"`
	Locality float64 `json:"locality"`
	History  float64 `json:"history"`
}

// DefaultProfileWeights: capacity 0.4, health 0.3, locality 0.2,
// history 0.1 (docs/scheduling.md, "The profile score").
func DefaultProfileWeights() ProfileWeights {
	return ProfileWeights{Capacity: 0.4, Health: 0.3, Locality: 0.2, History: 0.1}
}

// Config selects the optional parts of scoring. The zero value is the
// reference behaviour: the reference formula and a deterministic choice.
type Config struct {
	// ProfileScale turns the profile score on: a node's weighted profile
	// (0..1) times ProfileScale is added to its reference score. A scale
	// of 100_000 lets a perfect profile count like 100 points of weight
	// while never outweighing a preferred label.
	ProfileScale   int64
	ProfileWeights ProfileWeights
	// RandomTopK > 1 picks among the best K candidates whose scores are
	// within SpreadWindow of the best, at random, weighted by score, to
	// avoid hot spots. The draw is seeded by the request's Seed, so a
	// decision replays from the same state. SpreadWindow 0 admits any
	// score (a preferred label or a retry penalty can then lose).
	RandomTopK   int
	SpreadWindow int64
}

// Candidate is an eligible node with its score.
type Candidate struct {
	Node  *Node
	Score int64
}

// ErrNoEligibleNode is returned when no node passes the filter.
var ErrNoEligibleNode = errors.New("no eligible node")

// ReferenceScore is the reference formula (docs/scheduling.md):
// preferredLabelMatches*1_000_000 + weight*1_000 - runningAttempts*10_000.
func ReferenceScore(n *Node, req *Request) int64 {
	c := compile(req)
	return referenceScore(n, &c)
}

func referenceScore(n *Node, c *compiled) int64 {
	weight := n.Weight
	if weight <= 0 {
		weight = DefaultWeight
	}
	return int64(matchCount(n.Labels, c.preferred))*PreferredLabelPoints +
		int64(weight)*WeightPoints - int64(n.RunningAttempts)*RunningAttemptCost
}

// Score is the reference score, less the retry penalty, plus (when
// configured) the profile score.
func Score(n *Node, req *Request, cfg *Config) int64 {
	c := compile(req)
	return score(n, req, &c, cfg)
}

func score(n *Node, req *Request, c *compiled, cfg *Config) int64 {
	s := referenceScore(n, c)
	if f := req.FailedOn[n.ID]; f > 0 {
		s -= int64(f) * RetryNodePenalty
	}
	if n.Hibernating {
		s -= HibernatingPenalty
	}
	if cfg != nil && cfg.ProfileScale > 0 {
		s += int64(math.Round(ProfileScore(n, req, cfg.ProfileWeights) * float64(cfg.ProfileScale)))
	}
	return s
}

// ScoreParts is a node's score taken apart, for explanations.
type ScoreParts struct {
	// Reference is the reference formula's score (with the retry and
	// hibernation adjustments); Profile the points the profile adds.
	Reference int64 `json:"reference"`
	Profile   int64 `json:"profile"`
	// Capacity, Health, Locality and History are the profile's parts,
	// each 0..1, before weighting.
	Capacity float64 `json:"capacity"`
	Health   float64 `json:"health"`
	Locality float64 `json:"locality"`
	History  float64 `json:"history"`
	// Inputs says how much of the task's input the node holds ("holds 3.2
	// of 3.5 GB of inputs"); empty for a task without inputs.
	Inputs string `json:"inputs,omitempty"`
}

// Parts takes a node's score for a request apart.
func Parts(n *Node, req *Request, cfg *Config) ScoreParts {
	c := compile(req)
	p := profileParts(n, req)
	total := score(n, req, &c, cfg)
	var prof int64
	if cfg != nil && cfg.ProfileScale > 0 {
		prof = int64(math.Round(ProfileScore(n, req, cfg.ProfileWeights) * float64(cfg.ProfileScale)))
	}
	return ScoreParts{Reference: total - prof, Profile: prof, Capacity: p.capacity, Health: p.health, Locality: p.locality, History: p.history, Inputs: inputsText(n, req)}
}

// ProfileScore combines capacity, health, data locality and history into
// 0..1 with the given weights (see profileParts for each part).
func ProfileScore(n *Node, req *Request, w ProfileWeights) float64 {
	total := w.Capacity + w.Health + w.Locality + w.History
	if total <= 0 {
		return 0
	}
	p := profileParts(n, req)
	wl := w.Locality * localityFactor(req)
	denom := total - w.Locality + wl
	if denom <= 0 {
		return 0
	}
	return (w.Capacity*p.capacity + w.Health*p.health + wl*p.locality + w.History*p.history) / denom
}

// LocalityUnitBytes is the input size up to which locality counts at its
// configured weight: beyond it the weight grows with the input's bytes,
// up to MaxLocalityFactor times, so that for inputs of a gigabyte or more
// data gravity outweighs compute, as moving them over an edge link costs
// more than a slower CPU.
const (
	LocalityUnitBytes = 256 << 20
	MaxLocalityFactor = 4.0
)

// localityFactor scales the locality weight by the request's input
// bytes: at least 1 (and 1 when only names are known), 0 for a task
// without inputs.
func localityFactor(req *Request) float64 {
	if len(req.Inputs) == 0 {
		return 0
	}
	var want int64
	for _, in := range req.Inputs {
		want += in.Bytes
	}
	if want == 0 {
		return 1
	}
	return min(max(float64(want)/LocalityUnitBytes, 1), MaxLocalityFactor)
}

type parts struct{ capacity, health, locality, history float64 }

// profileParts computes the profile's parts, each 0..1:
//   - capacity: half what would be left free of CPU and memory after
//     placing the request, half the node's speed: its observed speed at
//     the request's class once it ran it (see history), else its measured
//     power (all of it the free share on an unmeasured node);
//   - health: the node's Health as the caller derived it;
//   - locality: the share of the request's input bytes the node holds (by
//     count when no sizes are known); 0 for a task without inputs, and
//     weighed by the inputs' size (localityFactor);
//   - history: the fleet's median run time of the request's class over
//     the node's (1 when either is unknown: a node earns a low history by
//     being slow, not by being new).
func profileParts(n *Node, req *Request) parts {
	free := n.Resources.Sub(n.Reserved).Sub(req.Resources)
	capacity := (ratio(free.CPUMillis, n.Resources.CPUMillis) + ratio(free.MemoryMB, n.Resources.MemoryMB)) / 2
	speed, observed := observedSpeed(n, req)
	switch {
	case observed:
		// The node ran this class: what its runs took, against the fleet,
		// says more than a half-second benchmark.
		capacity = (capacity + speed) / 2
	case n.Profile.Power > 0:
		capacity = (capacity + clamp01(n.Profile.Power)) / 2
	}
	p := parts{capacity: capacity, health: clamp01(n.Profile.Health), history: 1}
	if len(req.Inputs) > 0 {
		held, want := heldInputs(n, req)
		switch {
		case want > 0:
			p.locality = float64(held) / float64(want)
		default:
			count := 0
			for _, in := range req.Inputs {
				if _, ok := datasetBytes(n.Profile.Datasets, in.Name); ok {
					count++
				}
			}
			p.locality = float64(count) / float64(len(req.Inputs))
		}
	}
	if observed {
		p.history = speed
	}
	return p
}

// observedSpeed is the fleet's median run time of the request's class
// over the node's EWMA of it (0..1), and whether both are known.
func observedSpeed(n *Node, req *Request) (float64, bool) {
	if req.Class == "" || req.ClassMedianMillis <= 0 {
		return 0, false
	}
	ewma, ok := classTime(n.Profile.Classes, req.Class)
	if !ok || ewma <= 0 {
		return 0, false
	}
	return clamp01(float64(req.ClassMedianMillis) / float64(ewma)), true
}

// heldInputs returns the bytes of the request's inputs the node holds
// (each input counted up to its known size) and their total.
func heldInputs(n *Node, req *Request) (held, want int64) {
	for _, in := range req.Inputs {
		want += in.Bytes
		if b, ok := datasetBytes(n.Profile.Datasets, in.Name); ok {
			held += min(b, in.Bytes)
		}
	}
	return held, want
}

func inputsText(n *Node, req *Request) string {
	if len(req.Inputs) == 0 {
		return ""
	}
	held, want := heldInputs(n, req)
	if want == 0 {
		return "inputs held nowhere"
	}
	return "holds " + humanBytesOf(held, want) + " of inputs"
}

// humanBytesOf writes "3.2 of 3.5 GB" in the unit of the total.
func humanBytesOf(part, total int64) string {
	units := []string{"B", "kB", "MB", "GB", "TB"}
	div, u := 1.0, 0
	for u < len(units)-1 && float64(total)/div >= 1000 {
		div *= 1000
		u++
	}
	if u == 0 {
		return strconv.FormatInt(part, 10) + " of " + strconv.FormatInt(total, 10) + " B"
	}
	f := func(v int64) string { return strconv.FormatFloat(float64(v)/div, 'f', 1, 64) }
	return f(part) + " of " + f(total) + " " + units[u]
}

func datasetBytes(ds []Dataset, name string) (int64, bool) {
	i, ok := slices.BinarySearchFunc(ds, name, func(d Dataset, name string) int { return cmp.Compare(d.Name, name) })
	if !ok {
		return 0, false
	}
	return ds[i].Bytes, true
}

func classTime(cs []ClassTime, class string) (int64, bool) {
	i, ok := slices.BinarySearchFunc(cs, class, func(c ClassTime, class string) int { return cmp.Compare(c.Class, class) })
	if !ok {
		return 0, false
	}
	return cs[i].EWMAMillis, true
}

func ratio(part, whole int64) float64 {
	if whole <= 0 {
		return 0
	}
	return clamp01(float64(part) / float64(whole))
}

func clamp01(f float64) float64 {
	if math.IsNaN(f) {
		return 0
	}
	return min(max(f, 0), 1)
}

// Rank returns the eligible nodes with their scores, best first; ties are
// broken by node id ascending, so the order is total and stable.
func Rank(nodes []*Node, req *Request, cfg *Config) []Candidate {
	out := make([]Candidate, 0, len(nodes))
	c := compile(req)
	for _, n := range nodes {
		if evaluate(n, req, &c, nil) {
			out = append(out, Candidate{Node: n, Score: score(n, req, &c, cfg)})
		}
	}
	slices.SortFunc(out, compareCandidates)
	return out
}

func compareCandidates(a, b Candidate) int {
	if c := cmp.Compare(b.Score, a.Score); c != 0 {
		return c
	}
	return cmp.Compare(a.Node.ID, b.Node.ID)
}

// Select picks the node for a request: the best-scoring eligible node, or
// with RandomTopK a score-weighted draw among the best K within the
// spread window. In the deterministic case it allocates only the
// request's flattened labels, so the leader can call it for every queued
// task.
func Select(nodes []*Node, req *Request, cfg *Config) (Candidate, error) {
	if suspects(nodes, req) {
		// Nodes suspected for this work are a last resort: the evidence
		// that settles a suspicion (its tasks run again elsewhere) must
		// never wait on the suspects themselves.
		if c, err := selectAmong(nodes, req, cfg, true); err == nil {
			return c, nil
		}
	}
	return selectAmong(nodes, req, cfg, false)
}

// suspects reports whether any node is suspected for the request (see
// suspected).
func suspects(nodes []*Node, req *Request) bool {
	for _, n := range nodes {
		if len(n.Probation) > 0 && suspected(n, req.Class) {
			return true
		}
	}
	return false
}

// suspected reports whether the node is held from class.
func suspected(n *Node, class string) bool {
	return holds(n, class)
}

// selectAmong is Select over every eligible node, or with skipSuspects
// over those not suspected for the request.
func selectAmong(nodes []*Node, req *Request, cfg *Config, skipSuspects bool) (Candidate, error) {
	if skipSuspects {
		kept := make([]*Node, 0, len(nodes))
		for _, n := range nodes {
			if len(n.Probation) == 0 || !suspected(n, req.Class) {
				kept = append(kept, n)
			}
		}
		nodes = kept
	}
	if cfg != nil && cfg.RandomTopK > 1 {
		top := topK(nodes, req, cfg, cfg.RandomTopK)
		if len(top) == 0 {
			return Candidate{}, ErrNoEligibleNode
		}
		return weightedPick(avoidFailed(spreadGroup(top, cfg), req), req.Seed), nil
	}
	var best Candidate
	found := false
	c := compile(req)
	for _, n := range nodes {
		if !evaluate(n, req, &c, nil) {
			continue
		}
		cand := Candidate{Node: n, Score: score(n, req, &c, cfg)}
		if !found || compareCandidates(cand, best) < 0 {
			best, found = cand, true
		}
	}
	if !found {
		return Candidate{}, ErrNoEligibleNode
	}
	return best, nil
}

// topK returns Rank's first k candidates without sorting them all: one
// pass keeping the best k in order.
func topK(nodes []*Node, req *Request, cfg *Config, k int) []Candidate {
	top := make([]Candidate, 0, k+1)
	c := compile(req)
	for _, n := range nodes {
		if !evaluate(n, req, &c, nil) {
			continue
		}
		cand := Candidate{Node: n, Score: score(n, req, &c, cfg)}
		if len(top) == k && compareCandidates(cand, top[k-1]) >= 0 {
			continue
		}
		i, _ := slices.BinarySearchFunc(top, cand, compareCandidates)
		top = slices.Insert(top, i, cand)
		if len(top) > k {
			top = top[:k]
		}
	}
	return top
}

// avoidFailed drops from a random choice's group the nodes the task
// failed on, unless the best is one (then no other node fits).
func avoidFailed(group []Candidate, req *Request) []Candidate {
	if len(req.FailedOn) == 0 || req.FailedOn[group[0].Node.ID] > 0 {
		return group
	}
	out := group[:0:0]
	for _, c := range group {
		if req.FailedOn[c.Node.ID] == 0 {
			out = append(out, c)
		}
	}
	return out
}

// spreadGroup returns the leading candidates a random choice is made
// among: at most RandomTopK, each within SpreadWindow of the best.
func spreadGroup(ranked []Candidate, cfg *Config) []Candidate {
	top := ranked[:min(cfg.RandomTopK, len(ranked))]
	if cfg.SpreadWindow > 0 {
		n := 1
		for n < len(top) && ranked[0].Score-top[n].Score <= cfg.SpreadWindow {
			n++
		}
		top = top[:n]
	}
	return top
}

// weightedPick draws one candidate with a weight that grows linearly with
// its score: the best of the group weighs twice the worst (all equal when
// the scores are), so good nodes are favoured without becoming hot spots.
// The draw is a function of the seed alone, so it replays.
func weightedPick(top []Candidate, seed uint64) Candidate {
	if len(top) == 1 {
		return top[0]
	}
	high, low := top[0].Score, top[len(top)-1].Score
	weight := func(c Candidate) uint64 { return uint64(c.Score-low) + uint64(high-low) + 1 }
	var total uint64
	for _, c := range top {
		total += weight(c)
	}
	x := mix64(seed) % total
	for _, c := range top {
		if w := weight(c); x < w {
			return c
		} else {
			x -= w
		}
	}
	return top[0]
}

// mix64 is SplitMix64's finaliser: a seed's bits spread over the result.
func mix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
