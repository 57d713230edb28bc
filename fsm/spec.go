package fsm

import (
	"herd/scheduler"
	"herd/spec"
)

//go:generate go run ./internal/shapegen

// FromSpec is the stored form of a task spec: normalized, its shape
// (everything but the name and idempotency key) in a record that tasks
// submitted alike share, tiers as numbers.
func FromSpec(in spec.Task) TaskSpec {
	in = in.Normalize()
	return TaskSpec{Name: in.Name, IdempotencyKey: in.IdempotencyKey, TaskShape: shapeOf(in)}
}

// Spec is the task a stored spec holds, normalized; a spec without a
// shape holds no command.
func (s TaskSpec) Spec() spec.Task {
	out := spec.Task{Name: s.Name, IdempotencyKey: s.IdempotencyKey}
	if s.TaskShape != nil {
		s.fill(&out)
	}
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
