package cluster

import (
	"maps"
	"slices"

	"herd/api"
	"herd/config"
	"herd/fsm"
	"herd/scheduler"
	"herd/spec"
)

// withSizeTiers resolves a spec's size into the tiers it may run on, as
// this leader is configured: the replicated spec carries the tiers, so
// every replica checks a reservation the same way.
func withSizeTiers(in spec.Task, c config.Scheduler) spec.Task {
	switch in.Size {
	case "small":
		in.Tiers = c.SizeSmall
	case "medium":
		in.Tiers = c.SizeMedium
	case "large":
		in.Tiers = c.SizeLarge
	}
	return in
}

func toAPITask(t *fsm.Task, attempts []*fsm.Attempt) api.Task {
	out := api.Task{
		ID: t.ID, Name: t.Spec.Name, State: t.State.String(), Spec: t.Spec.Spec(),
		SubmittedAt: t.SubmittedAt(), CreateIndex: t.CreateIndex, ModifyIndex: t.ModifyIndex,
		CurrentAttempt: t.CurrentAttempt(),
		Attempts:       make([]api.Attempt, 0, len(attempts)),
		Timeline:       make([]api.TimelineEvent, 0, t.TimelineLen()),
	}
	sorted := slices.Clone(attempts)
	slices.SortFunc(sorted, func(a, b *fsm.Attempt) int { return a.Number - b.Number })
	for _, a := range sorted {
		out.Attempts = append(out.Attempts, toAPIAttempt(a))
	}
	for _, e := range t.Timeline() {
		out.Timeline = append(out.Timeline, api.TimelineEvent{Index: e.Index, Time: e.Time.Time(), Kind: e.Kind.String(), Message: e.Message})
	}
	return out
}

func toAPIExplanation(ex scheduler.Explanation) api.Explanation {
	out := api.Explanation{Total: ex.Total, Eligible: ex.Eligible, Summary: ex.Summary, Nodes: make([]api.NodeExplanation, 0, len(ex.Nodes))}
	for _, n := range ex.Nodes {
		ne := api.NodeExplanation{NodeID: n.NodeID, Eligible: n.Eligible, Score: n.Score, Reasons: []string{}, Codes: []string{}, Tier: n.Tier}
		if p := n.Parts; p != nil {
			ne.Parts = &api.ScoreParts{Reference: p.Reference, Profile: p.Profile, Capacity: p.Capacity, Health: p.Health, Locality: p.Locality, History: p.History, Inputs: p.Inputs}
		}
		for _, r := range n.Reasons {
			ne.Reasons = append(ne.Reasons, r.String())
			ne.Codes = append(ne.Codes, string(r.Code))
		}
		out.Nodes = append(out.Nodes, ne)
	}
	return out
}

func toAPIResources(r scheduler.Resources) api.Resources {
	return api.Resources{CPUMillis: r.CPUMillis, MemoryMB: r.MemoryMB, GPU: r.GPU, DiskMB: r.DiskMB}
}

func toAPINode(n *fsm.Node) api.Node {
	weight := n.Weight
	if weight <= 0 {
		weight = scheduler.DefaultWeight
	}
	labels := maps.Clone(n.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	capabilities := maps.Clone(n.Capabilities)
	if capabilities == nil {
		capabilities = map[string][]string{}
	}
	return api.Node{
		ID: n.ID, Address: n.Address, Version: n.Version, Labels: labels, Capabilities: capabilities,
		Management: string(n.Management), Liveness: string(n.Liveness), Scheduling: string(n.Scheduling),
		Resources: toAPIResources(n.Resources), Reserved: toAPIResources(n.Reserved),
		Free:  toAPIResources(n.Resources.Sub(n.Reserved)),
		Slots: n.Slots, RunningAttempts: n.RunningAttempts, Weight: weight,
		SessionGeneration: n.SessionGeneration, RegisteredAt: n.RegisteredAt.Time(), LastHeartbeat: n.LastHeartbeat.Time(),
		CreateIndex: n.CreateIndex, ModifyIndex: n.ModifyIndex, Conditions: toAPIConditions(n.Conditions),
	}
}

func toAPIConditions(cs []fsm.NodeCondition) []api.NodeCondition {
	if len(cs) == 0 {
		return nil
	}
	out := make([]api.NodeCondition, len(cs))
	for i, c := range cs {
		out[i] = api.NodeCondition{Type: c.Type, Message: c.Message, Since: c.Since.Time()}
	}
	return out
}

func toAPIAttempt(a *fsm.Attempt) api.Attempt {
	return api.Attempt{
		ID: a.ID, TaskID: a.TaskID, Number: a.Number, NodeID: a.NodeID, State: string(a.State), LeaseVersion: a.LeaseVersion,
		ReservedAt: a.ReservedAt.Time(), StartedAt: a.StartedAt.Time(), FinishedAt: a.FinishedAt.Time(),
		ExitCode: a.ExitCode, OutputTail: a.OutputTail, Error: a.Error,
	}
}
