package spec

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"herd/internal/check"
)

// Limits on a task, so one submit cannot bloat every replica's state.
const (
	MaxNameLen        = 256
	MaxCommandArgs    = 1024
	MaxCommandBytes   = 64 << 10
	MaxEnvEntries     = 256
	MaxLabelEntries   = 64
	MaxAttemptsLimit  = 100
	MaxPriority       = 100
	MaxTimeoutSeconds = 7 * 24 * 3600
	MaxDatasets       = 64
	MaxImageRefLen    = 1024
)

// FieldError is one broken rule, with the path of the field at fault in
// the JSON form ("resources.cpu_millis", "stages[build].task.command").
type FieldError struct {
	Path string
	Msg  string
}

func (e *FieldError) Error() string { return e.Path + ": " + e.Msg }

// problems collects the field errors of one validation, each path under
// a prefix.
type problems struct {
	prefix string
	errs   *[]error
}

func newProblems() *problems { return &problems{errs: new([]error)} }

func (p *problems) addf(path, format string, args ...any) {
	*p.errs = append(*p.errs, &FieldError{Path: p.prefix + path, Msg: fmt.Sprintf(format, args...)})
}

// under returns a collector for the fields below path, sharing p's list.
func (p *problems) under(path string) *problems {
	return &problems{prefix: p.prefix + path + ".", errs: p.errs}
}

func (p *problems) err() error { return check.JoinSorted(*p.errs) }

// Validate checks a normalized task against every rule a task obeys. The
// API runs it before a submit is proposed, and every replica runs it
// again in Apply, so an entry proposed by a buggy leader is rejected the
// same way everywhere. The error lists every problem, each naming its
// field.
func (t *Task) Validate() error {
	p := newProblems()
	t.validate(p)
	return p.err()
}

func (t *Task) validate(p *problems) {
	if len(t.Command) == 0 || t.Command[0] == "" {
		p.addf("command", "must not be empty")
	}
	if len(t.Command) > MaxCommandArgs {
		p.addf("command", "has %d arguments, at most %d allowed", len(t.Command), MaxCommandArgs)
	}
	total := 0
	for _, a := range t.Command {
		total += len(a)
	}
	if total > MaxCommandBytes {
		p.addf("command", "is %d bytes, at most %d allowed", total, MaxCommandBytes)
	}
	switch {
	case t.Priority == nil:
		p.addf("priority", "missing (the spec is not normalized)")
	case *t.Priority < 0 || *t.Priority > MaxPriority:
		p.addf("priority", "%d is outside 0..%d", *t.Priority, MaxPriority)
	}
	switch {
	case t.TimeoutSeconds == nil:
		p.addf("timeout_seconds", "missing (the spec is not normalized)")
	case *t.TimeoutSeconds <= 0 || *t.TimeoutSeconds > MaxTimeoutSeconds:
		p.addf("timeout_seconds", "%d is outside 1..%d", *t.TimeoutSeconds, MaxTimeoutSeconds)
	}
	switch {
	case t.MaxAttempts == nil:
		p.addf("max_attempts", "missing (the spec is not normalized)")
	case *t.MaxAttempts < 1 || *t.MaxAttempts > MaxAttemptsLimit:
		p.addf("max_attempts", "%d is outside 1..%d", *t.MaxAttempts, MaxAttemptsLimit)
	}
	t.Resources.validate(p.under("resources"))
	for _, f := range []struct{ path, v string }{
		{"name", t.Name}, {"idempotency_key", t.IdempotencyKey}, {"submitter", t.Submitter},
		{"capability", t.Capability}, {"capability_version", t.CapabilityVersion}, {"class", t.Class},
	} {
		if len(f.v) > MaxNameLen {
			p.addf(f.path, "is longer than %d bytes", MaxNameLen)
		}
	}
	if t.Capability == "" {
		p.addf("capability", "must not be empty")
	}
	if t.CapabilityVersion == "" {
		p.addf("capability_version", "must not be empty")
	}
	if t.OnDisconnect != "" && t.OnDisconnect != OnDisconnectKeepRunning {
		p.addf("on_disconnect", "%q must be %s or %s", t.OnDisconnect, OnDisconnectStop, OnDisconnectKeepRunning)
	}
	if len(t.Env) > MaxEnvEntries {
		p.addf("env", "has %d entries, at most %d allowed", len(t.Env), MaxEnvEntries)
	}
	for k := range t.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			p.addf("env", "name %q is invalid (empty, or holding '=' or NUL)", k)
		}
	}
	if len(t.RequiredLabels) > MaxLabelEntries {
		p.addf("required_labels", "has %d entries, at most %d allowed", len(t.RequiredLabels), MaxLabelEntries)
	}
	if len(t.PreferredLabels) > MaxLabelEntries {
		p.addf("preferred_labels", "has %d entries, at most %d allowed", len(t.PreferredLabels), MaxLabelEntries)
	}
	if t.Size != "" && !slices.Contains(Sizes, t.Size) {
		p.addf("size", "%q must be one of %s", t.Size, strings.Join(Sizes, ", "))
	}
	for i, tier := range t.Tiers {
		if !slices.ContainsFunc(Tiers, func(name string) bool { return strings.EqualFold(name, tier) }) {
			p.addf("tiers["+strconv.Itoa(i)+"]", "%q is not %s", tier, strings.Join(Tiers, ", "))
		}
	}
	datasets := func(field string, names []string) {
		if len(names) > MaxDatasets {
			p.addf(field, "has %d datasets, at most %d allowed", len(names), MaxDatasets)
		}
		for i, d := range names {
			if err := check.DatasetName(d); err != nil {
				p.addf(field+"["+strconv.Itoa(i)+"]", "%v", err)
			}
		}
	}
	datasets("inputs", t.Inputs)
	datasets("outputs", t.Outputs)
	switch t.Driver {
	case "":
		if t.Image != "" {
			p.addf("image", "is for the %s driver", DriverOCI)
		}
		if t.Network != "" {
			p.addf("network", "is for the %s driver", DriverOCI)
		}
	case DriverOCI:
		if t.Image == "" {
			p.addf("image", "the %s driver needs one", DriverOCI)
		}
		if t.Network != "" && t.Network != NetworkNone {
			p.addf("network", "%q must be %s or %s", t.Network, NetworkHost, NetworkNone)
		}
	default:
		p.addf("driver", "%q must be %s or %s", t.Driver, DriverExec, DriverOCI)
	}
	if len(t.Image) > MaxImageRefLen || strings.ContainsAny(t.Image, " \x00\n") {
		p.addf("image", "must be at most %d bytes without spaces, newlines or NUL", MaxImageRefLen)
	}
}

func (r Resources) validate(p *problems) {
	for _, f := range []struct {
		path string
		v    int64
	}{{"cpu_millis", r.CPUMillis}, {"memory_mb", r.MemoryMB}, {"gpu", r.GPU}, {"disk_mb", r.DiskMB}} {
		if f.v < 0 {
			p.addf(f.path, "%d must not be negative", f.v)
		}
	}
}
