package fsm

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// MessageType is the first byte of every Raft entry herd writes.
//
// Payloads are JSON, except the commands every task goes through, which
// have a compact binary form (binary.go). JSON was chosen over msgpack
// because encoding/json is in the standard library, writes map keys in
// sorted order (so the same command always encodes to the same bytes),
// rejects malformed input with an error instead of a panic, and keeps
// entries readable when an operator has to inspect a log. It costs a few
// microseconds per command: below an fsync for the rare commands, but
// most of a replica's work for the per-task ones, which come hundreds to
// an entry.
type MessageType uint8

// IgnoreUnknownFlag marks a command that an older replica may skip if it
// does not know the type (an optional hint), instead of failing the entry.
const IgnoreUnknownFlag MessageType = 0x80

// Message types. Values are part of the on-disk format: never renumber.
const (
	MsgBatch        MessageType = 1
	MsgNoop         MessageType = 2
	MsgUpsertServer MessageType = 3
	MsgRemoveServer MessageType = 4
	MsgSubmitTask   MessageType = 5
	MsgRegisterNode MessageType = 6
	MsgReserve      MessageType = 7
	MsgAttemptStart MessageType = 8
	MsgAttemptEnd   MessageType = 9
	MsgNodeDrain    MessageType = 10
	MsgNodeEligible MessageType = 11
	MsgHeartbeat    MessageType = 12
	MsgExplain      MessageType = 13
	MsgCancelTask   MessageType = 14
	MsgNodeDown     MessageType = 15
	MsgNodeLiveness MessageType = 16
	MsgForgetTasks  MessageType = 17
	// MsgNodeConditions is not ignorable: the conditions decide, at
	// apply time, whether a reservation on the node holds.
	MsgNodeConditions MessageType = 18
	// The ACL commands and the audit trail are not ignorable: a replica
	// that skipped them would judge credentials differently.
	MsgACLToken       MessageType = 19
	MsgACLTokenDelete MessageType = 20
	MsgAudit          MessageType = 21
	// MsgGossipKeyring changes the gossip pool's keyring.
	MsgGossipKeyring MessageType = 22
	// The profile commands are not ignorable: tiers and quarantines
	// decide, at apply time, whether a reservation holds.
	MsgProfileSettings MessageType = 23
	MsgNodeProfile     MessageType = 24
	MsgNodeDatasets    MessageType = 25
	MsgNodeTier        MessageType = 26
	MsgNodeHealthCheck MessageType = 27
	// The job commands create and cancel tasks: not ignorable.
	MsgSubmitJob  MessageType = 28
	MsgCancelJob  MessageType = 29
	MsgFireJob    MessageType = 30
	MsgRerunStage MessageType = 31
	// MsgForgetJobs removes finished jobs (retention). It came with the
	// command forms of version 6 and is written only while every server
	// reads them (see CommandForms).
	MsgForgetJobs MessageType = 32
	// MsgAttemptSlow marks a running attempt slow. It came with the
	// command forms of version 7.
	MsgAttemptSlow MessageType = 33
)

// payloadVersion is the version byte written after the type. A replica
// refuses a payload version it does not know rather than misreading it.
const payloadVersion = 1

// maxBatch bounds the number of commands one entry may carry, so a corrupt
// length prefix cannot make Apply allocate without limit.
const maxBatch = 1 << 16

// ErrUnknownCommand is returned for a message type this replica cannot
// apply and that is not flagged as ignorable.
var ErrUnknownCommand = errors.New("unknown command type")

// ErrMalformedCommand is returned for an entry that cannot be decoded.
var ErrMalformedCommand = errors.New("malformed command")

// CommandForms names the newest command forms this build reads: the
// binary payloads of binaryVersion, besides JSON. A replica refuses a
// command in a form it does not read, and its state falls behind the
// others', so a leader writes these forms only once every server in the
// Raft configuration has recorded that it reads them (Server.CommandForms)
// and JSON (EncodeJSON) until then: a rolling upgrade from a build without
// them stays consistent. A command new with a version is written under
// the same rule: forget-jobs came with version 6.
const CommandForms = binaryVersion

// FormsNeeded is the oldest command forms (see CommandForms) a server
// must report for its build to be sure to apply a command of type t; 0
// for the commands every build that reports forms applies. Each is the
// first forms version released after its commands: the profile commands
// came with version 4, the job commands while 4 was current (a build
// reporting 4 may predate them), forget-jobs with 6, attempt-slow with 7. The node
// conditions, ACL, audit and keyring commands predate some builds that
// report forms too, and are not held back: an audit record goes with
// every write under ACLs, and refusing it would stop an upgrade's
// writes.
func FormsNeeded(t MessageType) int {
	switch t &^ IgnoreUnknownFlag {
	case MsgProfileSettings, MsgNodeProfile, MsgNodeDatasets, MsgNodeTier, MsgNodeHealthCheck:
		return 4
	case MsgSubmitJob, MsgCancelJob, MsgFireJob, MsgRerunStage:
		return 5
	case MsgForgetJobs:
		return 6
	case MsgAttemptSlow:
		return 7
	}
	return 0
}

// Encode builds one command: type byte, version byte, payload. The
// commands every task goes through (submission, explanation, reservation,
// attempt start and end) get their binary form (see binaryVersion); the
// others JSON.
func Encode(t MessageType, payload any) ([]byte, error) {
	switch p := payload.(type) {
	case SubmitTaskRequest:
		if t == MsgSubmitTask {
			return EncodeSubmitTask(p), nil
		}
	case ReserveRequest:
		if t == MsgReserve {
			return EncodeReserve(p), nil
		}
	case AttemptStartRequest:
		if t == MsgAttemptStart {
			return EncodeAttemptStart(p), nil
		}
	case AttemptEndRequest:
		if t == MsgAttemptEnd {
			return EncodeAttemptEnd(p), nil
		}
	case ExplainRequest:
		if t == MsgExplain {
			return EncodeExplain(p), nil
		}
	}
	return EncodeJSON(t, payload)
}

// EncodeJSON builds one command with a JSON payload, the form every type
// can be read in (replicas read the entries older versions wrote).
func EncodeJSON(t MessageType, payload any) ([]byte, error) {
	body, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", t, err)
	}
	buf := make([]byte, 2, 2+len(body))
	buf[0] = byte(t)
	buf[1] = payloadVersion
	return append(buf, body...), nil
}

// EncodeBatch packs several encoded commands into one Raft entry. They are
// applied in order, in one state transaction, and each gets its own result.
func EncodeBatch(cmds [][]byte) []byte {
	size := 2 + binary.MaxVarintLen64
	for _, c := range cmds {
		size += binary.MaxVarintLen64 + len(c)
	}
	buf := make([]byte, 2, size)
	buf[0] = byte(MsgBatch)
	buf[1] = payloadVersion
	buf = binary.AppendUvarint(buf, uint64(len(cmds)))
	for _, c := range cmds {
		buf = binary.AppendUvarint(buf, uint64(len(c)))
		buf = append(buf, c...)
	}
	return buf
}

// DecodeBatch returns the commands of an entry EncodeBatch built.
func DecodeBatch(entry []byte) ([][]byte, error) {
	h, payload, err := decodeHeader(entry)
	if err != nil {
		return nil, err
	}
	if h.typ != MsgBatch {
		return nil, fmt.Errorf("%w: %s entry is not a batch", ErrMalformedCommand, h.typ)
	}
	return splitBatch(payload)
}

// header is a command's first two bytes, decoded.
type header struct {
	typ       MessageType
	ignorable bool
	binary    bool // payload in the binary form (binaryVersion), not JSON
	version   byte // the payload version byte
}

// decodeHeader splits an entry into its header and payload.
func decodeHeader(buf []byte) (header, []byte, error) {
	if len(buf) < 2 {
		return header{}, nil, fmt.Errorf("%w: entry of %d bytes is shorter than its header", ErrMalformedCommand, len(buf))
	}
	t := MessageType(buf[0])
	h := header{typ: t &^ IgnoreUnknownFlag, ignorable: t&IgnoreUnknownFlag != 0, version: buf[1]}
	switch {
	case buf[1] == payloadVersion:
	case buf[1] >= oldBinaryVersion && buf[1] <= binaryVersion && hasBinaryForm(h.typ):
		h.binary = true
	default:
		return h, nil, fmt.Errorf("%w: %s payload version %d not supported", ErrMalformedCommand, h.typ, buf[1])
	}
	return h, buf[2:], nil
}

// splitBatch returns the commands inside a batch payload.
func splitBatch(payload []byte) ([][]byte, error) {
	n, k := binary.Uvarint(payload)
	if k <= 0 || n > maxBatch {
		return nil, fmt.Errorf("%w: bad batch count", ErrMalformedCommand)
	}
	payload = payload[k:]
	cmds := make([][]byte, 0, n)
	for i := uint64(0); i < n; i++ {
		l, k := binary.Uvarint(payload)
		if k <= 0 || l > uint64(len(payload)-k) {
			return nil, fmt.Errorf("%w: batch command %d truncated", ErrMalformedCommand, i)
		}
		payload = payload[k:]
		cmds = append(cmds, payload[:l])
		payload = payload[l:]
	}
	if len(payload) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes after batch", ErrMalformedCommand, len(payload))
	}
	return cmds, nil
}

func (t MessageType) String() string {
	switch t &^ IgnoreUnknownFlag {
	case MsgBatch:
		return "batch"
	case MsgNoop:
		return "noop"
	case MsgUpsertServer:
		return "upsert-server"
	case MsgRemoveServer:
		return "remove-server"
	case MsgSubmitTask:
		return "submit-task"
	case MsgRegisterNode:
		return "register-node"
	case MsgReserve:
		return "reserve"
	case MsgAttemptStart:
		return "attempt-start"
	case MsgAttemptEnd:
		return "attempt-end"
	case MsgNodeDrain:
		return "node-drain"
	case MsgNodeEligible:
		return "node-eligibility"
	case MsgHeartbeat:
		return "heartbeat"
	case MsgExplain:
		return "explain"
	case MsgCancelTask:
		return "cancel-task"
	case MsgNodeDown:
		return "node-down"
	case MsgNodeLiveness:
		return "node-liveness"
	case MsgForgetTasks:
		return "forget-tasks"
	case MsgNodeConditions:
		return "node-conditions"
	case MsgACLToken:
		return "acl-token"
	case MsgACLTokenDelete:
		return "acl-token-delete"
	case MsgAudit:
		return "audit"
	case MsgGossipKeyring:
		return "gossip-keyring"
	case MsgProfileSettings:
		return "profile-settings"
	case MsgNodeProfile:
		return "node-profile"
	case MsgNodeDatasets:
		return "node-datasets"
	case MsgNodeTier:
		return "node-tier"
	case MsgNodeHealthCheck:
		return "node-health-check"
	case MsgSubmitJob:
		return "submit-job"
	case MsgCancelJob:
		return "cancel-job"
	case MsgFireJob:
		return "fire-job"
	case MsgForgetJobs:
		return "forget-jobs"
	case MsgRerunStage:
		return "rerun-stage"
	case MsgAttemptSlow:
		return "attempt-slow"
	}
	return fmt.Sprintf("type-%d", uint8(t))
}

// UpsertServerRequest records how to reach a replica.
type UpsertServerRequest struct {
	Server Server `json:"server"`
}

// RemoveServerRequest forgets a replica's metadata.
type RemoveServerRequest struct {
	ID string `json:"id"`
}

// SubmitTaskRequest creates a task. ID and SubmittedAt are chosen by the
// leader before the entry is proposed, so Apply stays deterministic.
type SubmitTaskRequest struct {
	ID          string    `json:"id"`
	SubmittedAt time.Time `json:"submitted_at"`
	Spec        TaskSpec  `json:"spec"`
	// shapeKey is the spec's shape as encoded in the binary form it was
	// decoded from (nil from JSON): the interner's key for the shape.
	// shapeShared says the decoder already took the shape from the
	// interner.
	shapeKey    []byte
	shapeShared bool
}

// RegisterNodeRequest creates or refreshes a worker node. Every
// registration starts a new session generation.
type RegisterNodeRequest struct {
	Node Node      `json:"node"`
	Now  time.Time `json:"now"`
}

// NoopRequest carries padding only; it exercises the log (benchmarks,
// barriers) without touching the state.
type NoopRequest struct {
	Pad []byte `json:"pad,omitempty"`
}

// ReserveRequest places a task's next attempt on a node. The leader
// decided it from a possibly stale view; Apply re-checks everything
// against the committed state with the scheduler's own rules.
type ReserveRequest struct {
	TaskID            string        `json:"task_id"`
	AttemptID         string        `json:"attempt_id"`
	Number            int           `json:"number"`
	NodeID            string        `json:"node_id"`
	SessionGeneration uint64        `json:"session_generation"`
	Score             int64         `json:"score"`
	Now               time.Time     `json:"now"`
	HeartbeatTTL      time.Duration `json:"heartbeat_ttl"`
	// Backup reserves a speculative task's backup attempt beside its slow
	// current one (see TaskShape.Speculative). Only the binary form
	// (version 7) carries it: the leader proposes backups only once every
	// server reads those forms.
	Backup bool `json:"-"`
}

// AttemptStartRequest reports that an attempt's process started.
type AttemptStartRequest struct {
	AttemptID    string    `json:"attempt_id"`
	LeaseVersion uint64    `json:"lease_version"`
	Now          time.Time `json:"now"`
}

// AttemptEndRequest reports how an attempt ended. RetryAt, chosen by the
// leader from the backoff policy, is when a retry may be scheduled.
type AttemptEndRequest struct {
	AttemptID    string       `json:"attempt_id"`
	LeaseVersion uint64       `json:"lease_version"`
	State        AttemptState `json:"state"`
	ExitCode     int          `json:"exit_code"`
	OutputTail   string       `json:"output_tail,omitempty"`
	Error        string       `json:"error,omitempty"`
	Now          time.Time    `json:"now"`
	RetryAt      time.Time    `json:"retry_at"`
	// OnlyReserved makes the end apply only to an attempt still RESERVED:
	// the leader reclaims an attempt its agent never started, and a start
	// that commits between the leader's look and the reclaim's commit
	// keeps its attempt. Only the binary form (version 6) carries it, so
	// a replica that reads JSON alone never sees a condition it would
	// ignore; in JSON the end is unconditional.
	OnlyReserved bool `json:"-"`
	// InputUnavailable marks a LOST end whose attempt could not fetch an
	// input from any live node: neither the task's fault nor the node's,
	// it uses none of the task's attempts and counts against no node.
	// Only the binary form (version 7) carries it; in JSON the end is a
	// plain LOST.
	InputUnavailable bool `json:"-"`
}

// NodeDrainRequest stops (or resumes) new placements on a node.
type NodeDrainRequest struct {
	NodeID string    `json:"node_id"`
	Enable bool      `json:"enable"`
	Now    time.Time `json:"now"`
}

// NodeEligibilityRequest marks a node eligible or not for new attempts.
type NodeEligibilityRequest struct {
	NodeID   string    `json:"node_id"`
	Eligible bool      `json:"eligible"`
	Now      time.Time `json:"now"`
}

// NodeConditionsRequest replaces the conditions a node's agent reports
// (what is wrong with it: a full disk) with Conditions, for the session
// that reported them. Since is ignored: the FSM stamps a new condition
// with Now and keeps the stamp of one that stands.
type NodeConditionsRequest struct {
	NodeID            string          `json:"node_id"`
	SessionGeneration uint64          `json:"session_generation"`
	Conditions        []NodeCondition `json:"conditions"`
	// Notes become node events (what the agent did on its own); one the
	// node's events already hold is not added again (a retried report).
	Notes []string  `json:"notes,omitempty"`
	Now   time.Time `json:"now"`
}

// HeartbeatRequest records that a node's current session is alive.
type HeartbeatRequest struct {
	NodeID            string    `json:"node_id"`
	SessionGeneration uint64    `json:"session_generation"`
	Now               time.Time `json:"now"`
}

// ExplainRequest records why a pending task waits, when that changed.
type ExplainRequest struct {
	TaskID  string    `json:"task_id"`
	Summary string    `json:"summary"`
	Now     time.Time `json:"now"`
}

// CancelTaskRequest cancels a task; its live attempt, if any, is cancelled
// with it and its reservation released.
type CancelTaskRequest struct {
	TaskID string    `json:"task_id"`
	Reason string    `json:"reason,omitempty"`
	Now    time.Time `json:"now"`
}

// NodeDownRequest declares a node down: every live attempt on it is LOST,
// its reservation released and its task requeued; their fencing tokens die.
type NodeDownRequest struct {
	NodeID string    `json:"node_id"`
	Reason string    `json:"reason"`
	Now    time.Time `json:"now"`
	// RetryAt is the earliest the reclaimed attempts' tasks may run
	// again: once the node's agent has stopped them (its lease is out).
	// Zero or earlier than Now: at once.
	RetryAt time.Time `json:"retry_at,omitzero"`
}

// NodeLivenessRequest moves a node between READY and SUSPECT, with the
// observation that caused it. DOWN goes through NodeDownRequest (it
// reclaims); a DOWN node comes back only by registering again.
type NodeLivenessRequest struct {
	NodeID            string    `json:"node_id"`
	SessionGeneration uint64    `json:"session_generation"`
	Liveness          string    `json:"liveness"`
	Reason            string    `json:"reason"`
	Now               time.Time `json:"now"`
}

// ForgetJobsRequest removes finished jobs none of whose stages' tasks is
// left (retention). The leader chooses them; Apply checks each still is.
type ForgetJobsRequest struct {
	JobIDs []string `json:"job_ids"`
}

// ForgetTasksRequest removes finished tasks and their attempts (retention).
// The leader chooses them; Apply only checks each is still terminal.
type ForgetTasksRequest struct {
	TaskIDs []string `json:"task_ids"`
}
