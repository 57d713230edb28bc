package fsm

import "fmt"

// Rejection codes of placements and attempt reports, besides the
// scheduler's own reason codes (a re-check failing a filter rule is
// rejected with that rule's code).
const (
	RejectTaskNotPending  = "task_not_pending"
	RejectTaskBackoff     = "task_backing_off"
	RejectAttemptNumber   = "attempt_number_mismatch"
	RejectSessionChanged  = "session_changed"
	RejectStale           = "stale_result"
	RejectIllegalTransfer = "illegal_transition"
)

// Rejection is a typed refusal of a well-formed command: the state did not
// allow it. It is returned through ApplyFuture.Response, never panicked.
type Rejection struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func reject(code, format string, args ...any) *Rejection {
	return &Rejection{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (r *Rejection) Error() string { return r.Code + ": " + r.Message }

// Rejection codes.
const (
	RejectInvalid  = "invalid"
	RejectNotFound = "not_found"
	RejectConflict = "conflict"
)
