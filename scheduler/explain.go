package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// NodeExplanation says why one node can or cannot take a task.
type NodeExplanation struct {
	NodeID   string   `json:"node_id"`
	Eligible bool     `json:"eligible"`
	Reasons  []Reason `json:"reasons"`
	Score    *int64   `json:"score"`
	// Tier is the node's tier ("" when unknown); Parts its score taken
	// apart, for an eligible node.
	Tier  string      `json:"tier,omitempty"`
	Parts *ScoreParts `json:"parts,omitempty"`
}

// Explanation answers "why is this task waiting?" over a node set.
type Explanation struct {
	Total    int               `json:"total"`
	Eligible int               `json:"eligible"`
	Summary  string            `json:"summary"`
	Nodes    []NodeExplanation `json:"nodes"`
}

// Explain evaluates every node for the request. Nodes are listed eligible
// first by score, then the rest by id. The summary reads
// "0/5 nodes eligible: 3 CPU below minimum, 1 heartbeat expired, 1 missing
// capability gpu-infer@2": each failed rule counted once per node that
// fails it, most common first, ties by text.
func Explain(nodes []*Node, req *Request, cfg *Config) Explanation {
	ex := Explanation{Total: len(nodes), Nodes: make([]NodeExplanation, 0, len(nodes))}
	counts := map[string]int{}
	c := compile(req)
	for _, n := range nodes {
		var reasons []Reason
		evaluate(n, req, &c, &reasons)
		ne := NodeExplanation{NodeID: n.ID, Eligible: len(reasons) == 0, Reasons: reasons, Tier: n.Tier.String()}
		if ne.Reasons == nil {
			ne.Reasons = []Reason{}
		}
		if ne.Eligible {
			s := score(n, req, &c, cfg)
			ne.Score = &s
			parts := Parts(n, req, cfg)
			ne.Parts = &parts
			ex.Eligible++
		}
		for _, r := range reasons {
			counts[r.Summary]++
		}
		ex.Nodes = append(ex.Nodes, ne)
	}
	slices.SortFunc(ex.Nodes, func(a, b NodeExplanation) int {
		switch {
		case a.Eligible && !b.Eligible:
			return -1
		case !a.Eligible && b.Eligible:
			return 1
		case a.Eligible && b.Eligible:
			if c := cmp.Compare(*b.Score, *a.Score); c != 0 {
				return c
			}
		}
		return cmp.Compare(a.NodeID, b.NodeID)
	})
	ex.Summary = summarize(ex.Eligible, ex.Total, counts)
	return ex
}

// Summarize returns Explain's summary alone: what a scheduling pass
// records for a task it cannot place, without building, scoring and
// sorting an explanation per node: a pass over a backlog that cannot be
// placed calls it for many tasks over every node.
func Summarize(nodes []*Node, req *Request) string {
	counts := map[string]int{}
	c := compile(req)
	c.summaryOnly = true
	eligible := 0
	var reasons []Reason
	for _, n := range nodes {
		reasons = reasons[:0]
		if evaluate(n, req, &c, &reasons) {
			eligible++
		}
		for _, r := range reasons {
			counts[r.Summary]++
		}
	}
	return summarize(eligible, len(nodes), counts)
}

func summarize(eligible, total int, counts map[string]int) string {
	head := fmt.Sprintf("%d/%d nodes eligible", eligible, total)
	if total == 0 {
		return head + ": no nodes registered"
	}
	if len(counts) == 0 {
		return head
	}
	type kv struct {
		text string
		n    int
	}
	list := make([]kv, 0, len(counts))
	for k, v := range counts {
		list = append(list, kv{k, v})
	}
	slices.SortFunc(list, func(a, b kv) int {
		if c := cmp.Compare(b.n, a.n); c != 0 {
			return c
		}
		return cmp.Compare(a.text, b.text)
	})
	parts := make([]string, len(list))
	for i, e := range list {
		parts[i] = fmt.Sprintf("%d %s", e.n, e.text)
	}
	return head + ": " + strings.Join(parts, ", ")
}
