package scheduler

import (
	"cmp"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
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
	// node, so a retry goes elsewhere when it can (half a preferred label).
	RetryNodePenalty = 500_000
	// HibernatingPenalty makes an awake node win over a sleeping one with
	// the same preferred labels: waking a node costs seconds.
	HibernatingPenalty = 300_000
)

// ProfileWeights weigh the parts of the profile score.
type ProfileWeights struct {
	Capacity float64
	Health   float64
	Locality float64
	History  float64
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
	// RandomTopK > 1 picks among the best K candidates at random, weighted
	// by score, to avoid hot spots. Rand must then be set: the caller
	// seeds it, so a decision can be replayed.
	RandomTopK int
	Rand       *rand.Rand
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
	return score(n, &c, cfg)
}

func score(n *Node, c *compiled, cfg *Config) int64 {
	req := c.req
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

// ProfileScore combines capacity left after placing the request, health,
// data locality and history into 0..1 with the given weights.
func ProfileScore(n *Node, req *Request, w ProfileWeights) float64 {
	total := w.Capacity + w.Health + w.Locality + w.History
	if total <= 0 {
		return 0
	}
	free := n.Resources.Sub(n.Reserved).Sub(req.Resources)
	capacity := (ratio(free.CPUMillis, n.Resources.CPUMillis) + ratio(free.MemoryMB, n.Resources.MemoryMB)) / 2
	locality := 0.0
	if len(req.DataLocality) > 0 {
		held := 0
		for _, d := range req.DataLocality {
			if slices.Contains(n.Profile.Datasets, d) {
				held++
			}
		}
		locality = float64(held) / float64(len(req.DataLocality))
	}
	s := w.Capacity*capacity + w.Health*clamp01(n.Profile.Health) + w.Locality*locality + w.History*clamp01(n.Profile.History)
	return s / total
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
		if evaluate(n, &c, nil) {
			out = append(out, Candidate{Node: n, Score: score(n, &c, cfg)})
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
// with RandomTopK a score-weighted draw among the best K. In the
// deterministic case it allocates only the request's flattened labels, so
// the leader can call it for every queued task.
func Select(nodes []*Node, req *Request, cfg *Config) (Candidate, error) {
	if cfg != nil && cfg.RandomTopK > 1 && cfg.Rand != nil {
		ranked := Rank(nodes, req, cfg)
		if len(ranked) == 0 {
			return Candidate{}, ErrNoEligibleNode
		}
		return weightedPick(ranked[:min(cfg.RandomTopK, len(ranked))], cfg.Rand), nil
	}
	var best Candidate
	found := false
	c := compile(req)
	for _, n := range nodes {
		if !evaluate(n, &c, nil) {
			continue
		}
		cand := Candidate{Node: n, Score: score(n, &c, cfg)}
		if !found || compareCandidates(cand, best) < 0 {
			best, found = cand, true
		}
	}
	if !found {
		return Candidate{}, ErrNoEligibleNode
	}
	return best, nil
}

// weightedPick draws one candidate with a weight that grows linearly with
// its score: the best of the group weighs twice the worst (all equal when
// the scores are), so good nodes are favoured without becoming hot spots.
func weightedPick(top []Candidate, rng *rand.Rand) Candidate {
	high, low := top[0].Score, top[len(top)-1].Score
	weight := func(c Candidate) uint64 { return uint64(c.Score-low) + uint64(high-low) + 1 }
	var total uint64
	for _, c := range top {
		total += weight(c)
	}
	x := rng.Uint64N(total)
	for _, c := range top {
		if w := weight(c); x < w {
			return c
		} else {
			x -= w
		}
	}
	return top[0]
}
