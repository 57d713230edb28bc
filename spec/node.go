package spec

import (
	"slices"

	"herd/internal/check"
)

// Node is what an agent declares of its node when it registers: its id,
// its labels and capabilities (name to the versions it offers), what it
// offers to tasks, how many attempts it runs at once, and its weight in
// placement (0: the scheduler's default).
type Node struct {
	ID           string              `json:"id"`
	Labels       map[string]string   `json:"labels,omitempty"`
	Capabilities map[string][]string `json:"capabilities,omitempty"`
	Resources    Resources           `json:"resources"`
	Slots        int                 `json:"slots"`
	Weight       int                 `json:"weight,omitempty"`
}

// Limits on a node's declaration.
const (
	MaxNodeLabels       = 64
	MaxNodeCapabilities = 64
	MaxNodeSlots        = 1024
	MaxNodeWeight       = 1_000_000
)

// Validate checks a node's declaration against every rule it obeys,
// each problem naming its field.
func (n *Node) Validate() error {
	p := newProblems()
	n.validate(p)
	return p.err()
}

func (n *Node) validate(p *problems) {
	if !check.ID(n.ID) {
		p.addf("id", "%q must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", n.ID)
	}
	n.Resources.validate(p.under("resources"))
	if n.Slots < 0 || n.Slots > MaxNodeSlots {
		p.addf("slots", "%d is outside 0..%d", n.Slots, MaxNodeSlots)
	}
	if n.Weight < 0 || n.Weight > MaxNodeWeight {
		p.addf("weight", "%d is outside 0..%d", n.Weight, MaxNodeWeight)
	}
	if len(n.Labels) > MaxNodeLabels {
		p.addf("labels", "has %d entries, at most %d allowed", len(n.Labels), MaxNodeLabels)
	}
	if len(n.Capabilities) > MaxNodeCapabilities {
		p.addf("capabilities", "has %d entries, at most %d allowed", len(n.Capabilities), MaxNodeCapabilities)
	}
	for name, versions := range n.Capabilities {
		if name == "" || len(versions) == 0 || slices.Contains(versions, "") {
			p.addf("capabilities", "%q needs a name and at least one non-empty version", name)
		}
	}
}
