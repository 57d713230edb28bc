package fsm

import (
	"encoding/json"
	"fmt"
)

// form is how a command's payload is encoded. Each command has one form:
// the commands every task goes through (submission, explanation,
// reservation, attempt start and end, and their combined forms) the
// compact binary one of
// binary.go, every other command JSON.
type form uint8

const (
	formJSON form = iota
	formBinary
)

// command is one command type: its name in logs and errors, its payload's
// form, and how its payload is decoded and applied.
type command struct {
	name  string
	form  form
	apply func(db *store, index uint64, payload []byte) (any, error)
}

// jsonCommand is a command whose payload is JSON decoded into R.
func jsonCommand[R any](name string, fn func(db *store, index uint64, r *R) (any, error)) command {
	return command{name: name, form: formJSON, apply: func(db *store, index uint64, payload []byte) (any, error) {
		var r R
		if err := json.Unmarshal(payload, &r); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrMalformedCommand, name, err)
		}
		return fn(db, index, &r)
	}}
}

// binaryCommand is a command whose payload is in the binary form, read by
// decode (which may use the store: a submission shares shapes through
// its interner).
func binaryCommand[R any](name string, decode func(db *store, payload []byte) (*R, error), fn func(db *store, index uint64, r *R) (any, error)) command {
	return command{name: name, form: formBinary, apply: func(db *store, index uint64, payload []byte) (any, error) {
		r, err := decode(db, payload)
		if err != nil {
			return nil, err
		}
		return fn(db, index, r)
	}}
}

// noIndex adapts an apply function that does not record the entry's
// index.
func noIndex[R any](fn func(db *store, r *R) (any, error)) func(*store, uint64, *R) (any, error) {
	return func(db *store, _ uint64, r *R) (any, error) { return fn(db, r) }
}

// commands is every command type by its number. A type without an entry
// is unknown to this build. Numbers are part of the on-disk format: never
// renumber, never reuse.
var commands = [...]command{
	MsgBatch:        {name: "batch"}, // applyEntry unpacks it
	MsgNoop:         {name: "noop", apply: func(*store, uint64, []byte) (any, error) { return nil, nil }},
	MsgUpsertServer: jsonCommand("upsert-server", applyUpsertServer),
	MsgRemoveServer: jsonCommand("remove-server", noIndex(applyRemoveServer)),
	MsgSubmitTask: binaryCommand("submit-task", func(db *store, p []byte) (*SubmitTaskRequest, error) {
		return decodeSubmitTaskWith(p, db.w.interner)
	}, applySubmitTask),
	MsgRegisterNode:    jsonCommand("register-node", applyRegisterNode),
	MsgReserve:         binaryCommand("reserve", ignoreStore(decodeReserve), applyReserve),
	MsgAttemptStart:    binaryCommand("attempt-start", ignoreStore(decodeAttemptStart), applyAttemptStart),
	MsgAttemptEnd:      binaryCommand("attempt-end", ignoreStore(decodeAttemptEnd), applyAttemptEnd),
	MsgNodeDrain:       jsonCommand("node-drain", applyNodeDrain),
	MsgNodeEligible:    jsonCommand("node-eligibility", applyNodeEligibility),
	MsgHeartbeat:       jsonCommand("heartbeat", applyHeartbeat),
	MsgExplain:         binaryCommand("explain", ignoreStore(decodeExplain), applyExplain),
	MsgCancelTask:      jsonCommand("cancel-task", applyCancelTask),
	MsgNodeDown:        jsonCommand("node-down", applyNodeDown),
	MsgNodeLiveness:    jsonCommand("node-liveness", applyNodeLiveness),
	MsgForgetTasks:     jsonCommand("forget-tasks", noIndex(applyForgetTasks)),
	MsgNodeConditions:  jsonCommand("node-conditions", applyNodeConditions),
	MsgACLToken:        jsonCommand("acl-token", applyACLToken),
	MsgACLTokenDelete:  jsonCommand("acl-token-delete", noIndex(applyACLTokenDelete)),
	MsgAudit:           jsonCommand("audit", applyAudit),
	MsgGossipKeyring:   jsonCommand("gossip-keyring", applyGossipKeyring),
	MsgProfileSettings: jsonCommand("profile-settings", applyProfileSettings),
	MsgNodeProfile:     jsonCommand("node-profile", applyNodeProfile),
	MsgNodeDatasets:    jsonCommand("node-datasets", applyNodeDatasets),
	MsgNodeTier:        jsonCommand("node-tier", applyNodeTier),
	MsgNodeHealthCheck: jsonCommand("node-health-check", applyNodeHealthCheck),
	MsgSubmitJob:       jsonCommand("submit-job", applySubmitJob),
	MsgCancelJob:       jsonCommand("cancel-job", applyCancelJob),
	MsgFireJob:         jsonCommand("fire-job", applyFireJob),
	MsgRerunStage:      jsonCommand("rerun-stage", applyRerunStage),
	MsgForgetJobs:      jsonCommand("forget-jobs", noIndex(applyForgetJobs)),
	MsgAttemptSlow:     jsonCommand("attempt-slow", applyAttemptSlow),
	MsgAttemptRun:      binaryCommand("attempt-run", ignoreStore(decodeAttemptRun), applyAttemptRun),
	MsgExplainMany:     binaryCommand("explain-many", ignoreStore(decodeExplainMany), applyExplainMany),
	MsgSubmitMany: binaryCommand("submit-many", func(db *store, p []byte) (*SubmitManyRequest, error) {
		return decodeSubmitManyWith(p, db.w.interner)
	}, applySubmitMany),
}

// ignoreStore adapts a decoder that needs nothing of the store.
func ignoreStore[R any](decode func([]byte) (*R, error)) func(*store, []byte) (*R, error) {
	return func(_ *store, p []byte) (*R, error) { return decode(p) }
}

// commandOf returns the command of type t (its ignorable flag cleared),
// and false for a type this build does not know.
func commandOf(t MessageType) (command, bool) {
	t &^= IgnoreUnknownFlag
	if int(t) >= len(commands) || commands[t].name == "" {
		return command{}, false
	}
	return commands[t], true
}
