package scheduler

import "herd/spec"

// Resources is an amount of allocatable capacity: what a node offers, what
// a task asks for, or what is reserved on a node (the spec's type).
type Resources = spec.Resources
