package fsm

import (
	"herd/scheduler"
	"herd/spec"
)

// FromSpec is the stored form of a task spec: normalized, its shape
// (everything but the name and idempotency key) in a record that tasks
// submitted alike share, tiers as numbers.
func FromSpec(in spec.Task) TaskSpec {
	in = in.Normalize()
	return TaskSpec{Name: in.Name, IdempotencyKey: in.IdempotencyKey, TaskShape: &TaskShape{
		Priority: *in.Priority, Command: in.Command, Env: in.Env, Capability: in.Capability, CapabilityVersion: in.CapabilityVersion,
		RequiredLabels: in.RequiredLabels, PreferredLabels: in.PreferredLabels, Resources: in.Resources,
		TimeoutSeconds: *in.TimeoutSeconds, MaxAttempts: *in.MaxAttempts, Submitter: in.Submitter, OnDisconnect: in.OnDisconnect,
		Class: in.Class, Size: in.Size, Tiers: parseTiers(in.Tiers), Inputs: in.Inputs, Outputs: in.Outputs, InputPaths: in.InputPaths,
		Driver: in.Driver, Image: in.Image, Network: in.Network, Speculative: in.Speculative,
	}}
}

// Spec is the task a stored spec holds, normalized; a spec without a
// shape holds no command.
func (s TaskSpec) Spec() spec.Task {
	out := spec.Task{Name: s.Name, IdempotencyKey: s.IdempotencyKey}
	if s.TaskShape == nil {
		return out
	}
	prio, timeout, maxAttempts := s.Priority, s.TimeoutSeconds, s.MaxAttempts
	out.Priority, out.TimeoutSeconds, out.MaxAttempts = &prio, &timeout, &maxAttempts
	out.Command, out.Env, out.Capability, out.CapabilityVersion = s.Command, s.Env, s.Capability, s.CapabilityVersion
	out.RequiredLabels, out.PreferredLabels, out.Resources = s.RequiredLabels, s.PreferredLabels, s.Resources
	out.Submitter, out.OnDisconnect, out.Class, out.Size, out.Tiers = s.Submitter, s.OnDisconnect, s.Class, s.Size, tierNames(s.Tiers)
	out.Inputs, out.Outputs, out.InputPaths = s.Inputs, s.Outputs, s.InputPaths
	out.Driver, out.Image, out.Network, out.Speculative = s.Driver, s.Image, s.Network, s.Speculative
	return out
}

// Validate checks a stored spec by the task rules of package spec. Every
// replica runs it again in Apply, so an entry proposed by a buggy leader
// is rejected the same way everywhere.
func (s *TaskSpec) Validate() error {
	t := s.Spec()
	return t.Validate()
}

// parseTiers reads tier names; an unknown one becomes TierUnknown, which
// validation refuses.
func parseTiers(names []string) []scheduler.Tier {
	if len(names) == 0 {
		return nil
	}
	out := make([]scheduler.Tier, len(names))
	for i, n := range names {
		out[i], _ = scheduler.ParseTier(n)
	}
	return out
}

func tierNames(ts []scheduler.Tier) []string {
	if len(ts) == 0 {
		return nil
	}
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.String()
	}
	return out
}
