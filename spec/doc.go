// Package spec holds what users declare: a task, a job of stages and its
// schedule, and the resources they ask for. Each type has one Normalize,
// which fills the defaults, and one Validate, which checks every rule once
// and names the field at fault; the CLI, the API, the FSM and the
// scheduler all use them, and the wire and storage encodings are made
// from these types rather than copied beside them.
package spec
