package fsm

import (
	"errors"
	"fmt"
	"strings"

	"herd/internal/check"
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
	if len(s.RequiredLabels) > MaxLabelEntries || len(s.PreferredLabels) > MaxLabelEntries {
		errs = append(errs, fmt.Errorf("at most %d required and %d preferred labels allowed", MaxLabelEntries, MaxLabelEntries))
	}
	return check.JoinSorted(errs)
}
