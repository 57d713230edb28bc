package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Eligible reports whether node can take the request. It runs the same
// rules as Check but stops at the first failure and builds no text.
func Eligible(n *Node, req *Request) bool {
	c := compile(req)
	return evaluate(n, req, &c, nil)
}

// Check returns every rule the node fails for the request; none means
// eligible. The leader uses it to explain, and the FSM to re-check a
// reservation at apply time. It and Eligible are two codings of the same
// rules: Check in the order reasons are shown, Eligible in the order that
// is cheapest to refuse, without building any text. TestEligibleAgreesWithCheck
// holds them to the same verdict on random nodes and requests.
func Check(n *Node, req *Request) []Reason {
	c := compile(req)
	var out []Reason
	evaluate(n, req, &c, &out)
	return out
}

// compiled is a request prepared once for evaluating many nodes: label
// maps flattened to slices (ranging over a map costs more than the rest of
// a node's checks) and the heartbeat cutoff computed.
type compiled struct {
	// summaryOnly: evaluate leaves Reason.Detail empty (Summarize counts
	// summaries only, and formatting details would be most of its work).
	summaryOnly bool
	// missingCapability is the capability rule's summary, made by the
	// first node that fails the rule: a passing check allocates nothing.
	missingCapability string
	cutoff            time.Time // heartbeats before it are expired (HeartbeatTTL > 0)
	required          []labelPair
	preferred         []labelPair
}

type labelPair struct{ key, value string }

func compile(req *Request) compiled {
	c := compiled{required: pairs(req.RequiredLabels), preferred: pairs(req.PreferredLabels)}
	if req.HeartbeatTTL > 0 {
		c.cutoff = req.Now.Add(-req.HeartbeatTTL)
	}
	return c
}

func pairs(m map[string]string) []labelPair {
	if len(m) == 0 {
		return nil
	}
	out := make([]labelPair, 0, len(m))
	for k, v := range m {
		out = append(out, labelPair{k, v})
	}
	slices.SortFunc(out, func(a, b labelPair) int { return strings.Compare(a.key, b.key) })
	return out
}

// evaluate applies every rule. With out nil it is eligible's yes/no;
// otherwise it appends a Reason per failed rule, in the order they are
// shown, and reports whether none failed.
func evaluate(n *Node, req *Request, c *compiled, out *[]Reason) bool {
	if out == nil {
		return eligible(n, req, c)
	}
	ok := true
	fail := func(code ReasonCode, summary, detail string) {
		ok = false
		*out = append(*out, Reason{Code: code, Summary: summary, Detail: detail})
	}
	if n.Management != ManagementActive {
		fail(ReasonNotActive, "not active", string(n.Management))
	}
	if n.Liveness != LivenessReady {
		fail(ReasonNotReady, "not ready", string(n.Liveness))
	}
	if n.Scheduling != SchedulingEligible {
		fail(ReasonIneligible, "ineligible", "")
	}
	if n.Condition != "" {
		fail(ReasonAgentCondition, "agent reports a problem", n.Condition)
	}
	if n.Quarantine != "" {
		fail(ReasonQuarantined, "quarantined", n.Quarantine)
	}
	if req.HeartbeatTTL > 0 && n.LastHeartbeat.Before(c.cutoff) {
		detail := ""
		if !c.summaryOnly {
			age := req.Now.Sub(n.LastHeartbeat).Truncate(time.Second)
			detail = fmt.Sprintf("last %s ago, TTL %s", age, req.HeartbeatTTL)
		}
		fail(ReasonHeartbeatExpired, "heartbeat expired", detail)
	}
	if req.Capability != "" && !slices.Contains(n.Capabilities[req.Capability], req.CapabilityVersion) {
		detail := ""
		if !c.summaryOnly {
			detail = "node has no " + req.Capability + " at any version"
			if vs := n.Capabilities[req.Capability]; len(vs) > 0 {
				detail = "node has " + req.Capability + "@" + strings.Join(vs, ",")
			}
		}
		if c.missingCapability == "" {
			c.missingCapability = "missing capability " + req.Capability + "@" + req.CapabilityVersion
		}
		fail(ReasonMissingCapability, c.missingCapability, detail)
	}
	if req.Driver != "" && !slices.Contains(n.Capabilities[req.Driver], DriverCapabilityVersion) {
		detail := "the task's driver runs only there"
		if !c.summaryOnly {
			detail = "no working " + req.Driver + " runtime on the node; the task's driver needs " + req.Driver + "@" + DriverCapabilityVersion
		}
		fail(ReasonMissingCapability, "missing capability "+req.Driver+"@"+DriverCapabilityVersion, detail)
	}
	if !labelsMatch(n.Labels, c.required) {
		detail := ""
		if !c.summaryOnly {
			k, _ := firstMismatch(n.Labels, req.RequiredLabels)
			detail = fmt.Sprintf("%s=%s required, node has none", k, req.RequiredLabels[k])
			if have, set := n.Labels[k]; set {
				detail = fmt.Sprintf("%s=%s required, node has %s=%s", k, req.RequiredLabels[k], k, have)
			}
		}
		fail(ReasonLabelMismatch, "required label mismatch", detail)
	}
	static := [4]struct {
		code       ReasonCode
		summary    string
		have, want int64
		unit       string
	}{
		{ReasonCPUBelowMinimum, "CPU below minimum", n.Resources.CPUMillis, req.Resources.CPUMillis, "millis"},
		{ReasonMemoryBelowMin, "memory below minimum", n.Resources.MemoryMB, req.Resources.MemoryMB, "MB"},
		{ReasonGPUBelowMinimum, "GPU below minimum", n.Resources.GPU, req.Resources.GPU, "units"},
		{ReasonDiskBelowMinimum, "disk below minimum", n.Resources.DiskMB, req.Resources.DiskMB, "MB"},
	}
	for _, r := range static {
		if r.have < r.want {
			detail := ""
			if !c.summaryOnly {
				detail = fmt.Sprintf("%d < %d %s", r.have, r.want, r.unit)
			}
			fail(r.code, r.summary, detail)
		}
	}
	if !tierAllowed(n.Tier, req.Tiers) {
		fail(ReasonTierBelowSize, tierSummary(n.Tier, req), "")
	}
	if n.RunningAttempts >= n.Slots {
		detail := ""
		if !c.summaryOnly {
			detail = fmt.Sprintf("%d of %d slots used", n.RunningAttempts, n.Slots)
		}
		fail(ReasonNoFreeSlot, "no free slot", detail)
	}
	// Reported only when the static capacity suffices, so one shortfall is
	// not reported twice.
	if free := n.Resources.Sub(n.Reserved); n.Resources.Covers(req.Resources) && !free.Covers(req.Resources) {
		detail := ""
		if !c.summaryOnly {
			detail = shortfall(free, req.Resources)
		}
		fail(ReasonInsufficientFree, "insufficient unreserved capacity", detail)
	}
	switch {
	case awaitingCheck(n):
		fail(ReasonProbation, "on probation", "failed fast since its last success: no new work until its health check answers")
	case n.RunningAttempts > 0 && onProbation(n):
		fail(ReasonProbation, "on probation", "failed fast at this work since its last success: one attempt at a time")
	}
	if req.Blacklist[n.ID] {
		fail(ReasonBlacklisted, "blacklisted for this task", "failed it twice, awaiting a health check")
	}
	if why, passed := req.PassedOver[n.ID]; passed {
		fail(ReasonPassedOver, "passed over", why)
	}
	return ok
}

// awaitingCheck reports whether the node takes no new work until its
// health check answers.
func awaitingCheck(n *Node) bool { return len(n.Probation) == 1 && n.Probation[0] == "!" }

// onProbation reports whether the node takes one attempt at a time.
func onProbation(n *Node) bool {
	return slices.Contains(n.Probation, "*")
}

// holds reports whether the node takes no attempt of class: it is held
// by name ("=NAME"), or as new to the node ("+new": a class its history
// does not hold).
func holds(n *Node, class string) bool {
	for _, p := range n.Probation {
		switch {
		case len(p) > 1 && p[0] == '=' && p[1:] == class:
			return true
		case p == "+new":
			if _, ran := classTime(n.Profile.Classes, class); !ran {
				return true
			}
		}
	}
	return false
}

// eligible is evaluate's yes/no answer, with the checks reordered by
// cost: first what the node record itself holds, then the lookups in its
// labels and capabilities, which touch memory elsewhere (over 10,000
// nodes that memory traffic is most of a decision's time).
func eligible(n *Node, req *Request, c *compiled) bool {
	if n.Management != ManagementActive || n.Liveness != LivenessReady || n.Scheduling != SchedulingEligible || n.Condition != "" || n.Quarantine != "" ||
		(req.HeartbeatTTL > 0 && n.LastHeartbeat.Before(c.cutoff)) ||
		n.RunningAttempts >= n.Slots || !n.Resources.Covers(req.Resources) ||
		!n.Resources.Sub(n.Reserved).Covers(req.Resources) || !tierAllowed(n.Tier, req.Tiers) {
		return false
	}
	if len(req.Blacklist) > 0 && req.Blacklist[n.ID] {
		return false
	}
	if len(n.Probation) > 0 && (awaitingCheck(n) || n.RunningAttempts > 0 && onProbation(n)) {
		return false
	}
	if len(req.PassedOver) > 0 {
		if _, passed := req.PassedOver[n.ID]; passed {
			return false
		}
	}
	return labelsMatch(n.Labels, c.required) &&
		(req.Capability == "" || slices.Contains(n.Capabilities[req.Capability], req.CapabilityVersion)) &&
		(req.Driver == "" || slices.Contains(n.Capabilities[req.Driver], DriverCapabilityVersion))
}

// tierAllowed reports whether a node of tier t may take a task allowed on
// tiers (none listed: any). A node not ranked yet is not held back.
func tierAllowed(t Tier, tiers []Tier) bool {
	return len(tiers) == 0 || t == TierUnknown || slices.Contains(tiers, t)
}

// tierSummary is the tier rule's reason: "tier L3 below size large".
func tierSummary(t Tier, req *Request) string {
	if req.Size != "" {
		return "tier " + t.String() + " below size " + req.Size
	}
	return "tier " + t.String() + " not allowed"
}

func labelsMatch(have map[string]string, want []labelPair) bool {
	for _, p := range want {
		if h, ok := have[p.key]; !ok || h != p.value {
			return false
		}
	}
	return true
}

// firstMismatch returns the first (in key order) required label the node
// lacks, so the reason text is stable.
func firstMismatch(have, want map[string]string) (string, bool) {
	var bad []string
	for k, v := range want {
		if h, ok := have[k]; !ok || h != v {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return "", false
	}
	slices.Sort(bad)
	return bad[0], true
}

func shortfall(free, want Resources) string {
	var parts []string
	add := func(name string, f, w int64, unit string) {
		if f < w {
			parts = append(parts, fmt.Sprintf("%s %d free < %d %s", name, max(f, 0), w, unit))
		}
	}
	add("cpu", free.CPUMillis, want.CPUMillis, "millis")
	add("memory", free.MemoryMB, want.MemoryMB, "MB")
	add("gpu", free.GPU, want.GPU, "units")
	add("disk", free.DiskMB, want.DiskMB, "MB")
	return strings.Join(parts, ", ")
}

// matchCount counts preferred labels the node carries.
func matchCount(have map[string]string, preferred []labelPair) int {
	n := 0
	for _, p := range preferred {
		if h, ok := have[p.key]; ok && h == p.value {
			n++
		}
	}
	return n
}
