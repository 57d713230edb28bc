// Package spec holds what users and agents declare: a task, a job of
// stages and its schedule, a node as its agent registers it, and the
// resources they ask for or offer. Each type has one Normalize,
// which fills the defaults, and one Validate, which checks every rule once
// and names the field at fault; the CLI, the API, the FSM and the
// scheduler all use them, and the wire and storage encodings are made
// from these types rather than copied beside them.
package spec
