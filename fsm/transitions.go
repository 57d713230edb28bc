package fsm

// Task and attempt state machines. Nothing moves backwards: a terminal
// state is final, and a retry is a new attempt (the task returns to
// PENDING; the failed attempt stays FAILED).

var taskTransitions = map[TaskState][]TaskState{
	TaskPending:   {TaskScheduled, TaskCancelled},
	TaskScheduled: {TaskRunning, TaskPending, TaskSucceeded, TaskFailed, TaskTimedOut, TaskCancelled},
	TaskRunning:   {TaskPending, TaskSucceeded, TaskFailed, TaskTimedOut, TaskCancelled},
}

var attemptTransitions = map[AttemptState][]AttemptState{
	AttemptReserved: {AttemptRunning, AttemptSucceeded, AttemptFailed, AttemptTimedOut, AttemptLost, AttemptCancelled},
	AttemptRunning:  {AttemptSucceeded, AttemptFailed, AttemptTimedOut, AttemptLost, AttemptCancelled},
}

// ValidTaskTransition reports whether a task may move from one state to
// another.
func ValidTaskTransition(from, to TaskState) bool {
	for _, s := range taskTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// ValidAttemptTransition reports whether an attempt may move from one
// state to another.
func ValidAttemptTransition(from, to AttemptState) bool {
	for _, s := range attemptTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}
