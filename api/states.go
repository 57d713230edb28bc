package api

// The states the API reports and accepts, by name. The replicated state
// keeps its own typed copies (fsm, scheduler); these are the wire names
// clients, agents and the CLI compare with.

// Task states.
const (
	TaskPending   = "PENDING"
	TaskScheduled = "SCHEDULED"
	TaskRunning   = "RUNNING"
	TaskSucceeded = "SUCCEEDED"
	TaskFailed    = "FAILED"
	TaskTimedOut  = "TIMED_OUT"
	TaskCancelled = "CANCELLED"
)

// Attempt states. An agent reports one of the ending states SUCCEEDED,
// FAILED, TIMED_OUT or LOST for an attempt it ran.
const (
	AttemptReserved  = "RESERVED"
	AttemptRunning   = "RUNNING"
	AttemptSucceeded = "SUCCEEDED"
	AttemptFailed    = "FAILED"
	AttemptTimedOut  = "TIMED_OUT"
	AttemptLost      = "LOST"
	AttemptCancelled = "CANCELLED"
)

// Node liveness, as the leader declares it.
const (
	LivenessReady   = "READY"
	LivenessSuspect = "SUSPECT"
	LivenessDown    = "DOWN"
)
