package fsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"herd/internal/check"
	"herd/scheduler"
)

// Limits on a task spec, so one submit cannot bloat every replica's state.
const (
	MaxNameLen        = 256
	MaxCommandArgs    = 1024
	MaxCommandBytes   = 64 << 10
	MaxEnvEntries     = 256
	MaxLabelEntries   = 64
	MaxAttemptsLimit  = 100
	MaxPriority       = 100
	MaxTimeoutSeconds = 7 * 24 * 3600
)

// TaskSizes are the sizes a task may declare.
var TaskSizes = []string{"small", "medium", "large"}

// Validate checks a spec whose defaults have been applied. Every replica
// runs it again in Apply, so an entry proposed by a buggy leader is
// rejected the same way everywhere.
func (s *TaskSpec) Validate() error {
	if s.TaskShape == nil {
		return errors.New("command must not be empty")
	}
	var errs []error
	if len(s.Command) == 0 || s.Command[0] == "" {
		errs = append(errs, errors.New("command must not be empty"))
	}
	if len(s.Command) > MaxCommandArgs {
		errs = append(errs, fmt.Errorf("command has %d arguments, at most %d allowed", len(s.Command), MaxCommandArgs))
	}
	total := 0
	for _, a := range s.Command {
		total += len(a)
	}
	if total > MaxCommandBytes {
		errs = append(errs, fmt.Errorf("command is %d bytes, at most %d allowed", total, MaxCommandBytes))
	}
	if s.Priority < 0 || s.Priority > MaxPriority {
		errs = append(errs, fmt.Errorf("priority %d is outside 0..%d", s.Priority, MaxPriority))
	}
	if s.Resources.Negative() {
		errs = append(errs, errors.New("resources must not be negative"))
	}
	if s.TimeoutSeconds <= 0 || s.TimeoutSeconds > MaxTimeoutSeconds {
		errs = append(errs, fmt.Errorf("timeout_seconds %d is outside 1..%d", s.TimeoutSeconds, MaxTimeoutSeconds))
	}
	if s.MaxAttempts < 1 || s.MaxAttempts > MaxAttemptsLimit {
		errs = append(errs, fmt.Errorf("max_attempts %d is outside 1..%d", s.MaxAttempts, MaxAttemptsLimit))
	}
	for field, v := range map[string]string{"name": s.Name, "idempotency_key": s.IdempotencyKey, "submitter": s.Submitter, "capability": s.Capability, "capability_version": s.CapabilityVersion} {
		if len(v) > MaxNameLen {
			errs = append(errs, fmt.Errorf("%s is longer than %d bytes", field, MaxNameLen))
		}
	}
	if s.OnDisconnect != "" && s.OnDisconnect != OnDisconnectKeepRunning {
		errs = append(errs, fmt.Errorf("on_disconnect %q must be stop or %s", s.OnDisconnect, OnDisconnectKeepRunning))
	}
	if s.Capability == "" || s.CapabilityVersion == "" {
		errs = append(errs, errors.New("capability and capability_version must not be empty"))
	}
	if len(s.Env) > MaxEnvEntries {
		errs = append(errs, fmt.Errorf("env has %d entries, at most %d allowed", len(s.Env), MaxEnvEntries))
	}
	for k := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			errs = append(errs, fmt.Errorf("env name %q is invalid", k))
		}
	}
	if len(s.Class) > MaxNameLen {
		errs = append(errs, fmt.Errorf("class is longer than %d bytes", MaxNameLen))
	}
	if s.Size != "" && !slices.Contains(TaskSizes, s.Size) {
		errs = append(errs, fmt.Errorf("size %q must be one of %s", s.Size, strings.Join(TaskSizes, ", ")))
	}
	for _, t := range s.Tiers {
		if t < scheduler.TierL1 || t > scheduler.TierL3 {
			errs = append(errs, fmt.Errorf("tier %d is not L1, L2 or L3", t))
		}
	}
	if len(s.Inputs) > MaxDatasets || len(s.Outputs) > MaxDatasets {
		errs = append(errs, fmt.Errorf("at most %d inputs and %d outputs allowed", MaxDatasets, MaxDatasets))
	}
	for _, d := range append(slices.Clone(s.Inputs), s.Outputs...) {
		if err := check.DatasetName(d); err != nil {
			errs = append(errs, err)
		}
	}
	switch s.Driver {
	case "":
		if s.Image != "" || s.Network != "" {
			errs = append(errs, errors.New("image and network are for the oci driver"))
		}
	case DriverOCI:
		if s.Image == "" {
			errs = append(errs, errors.New("the oci driver needs an image"))
		}
		if s.Network != "" && s.Network != NetworkNone {
			errs = append(errs, fmt.Errorf("network %q must be host or %s", s.Network, NetworkNone))
		}
	default:
		errs = append(errs, fmt.Errorf("driver %q must be exec or %s", s.Driver, DriverOCI))
	}
	if len(s.Image) > MaxImageRefLen || strings.ContainsAny(s.Image, " \x00\n") {
		errs = append(errs, fmt.Errorf("image reference must be at most %d bytes without spaces, newlines or NUL", MaxImageRefLen))
	}
	if len(s.RequiredLabels) > MaxLabelEntries || len(s.PreferredLabels) > MaxLabelEntries {
		errs = append(errs, fmt.Errorf("at most %d required and %d preferred labels allowed", MaxLabelEntries, MaxLabelEntries))
	}
	return check.JoinSorted(errs)
}
