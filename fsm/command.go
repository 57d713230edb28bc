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
// Payloads are JSON, except the commands every task goes through, whose
// one form is a compact binary one (binary.go); codec.go says which. JSON was chosen over msgpack
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
	// MsgForgetJobs removes finished jobs (retention).
	MsgForgetJobs MessageType = 32
	// MsgAttemptSlow marks a running attempt slow.
	MsgAttemptSlow MessageType = 33
	// MsgAttemptRun records an attempt that ran and ended before its
	// start was committed: its start and its end in one command (forms
	// 2 on).
	MsgAttemptRun MessageType = 34
	// MsgExplainMany records why several pending tasks wait, for one
	// reason: a pass's explanations, a command per reason (forms 3 on).
	MsgExplainMany MessageType = 35
	// MsgSubmitMany submits several tasks at one time, their distinct
	// shapes written once (forms 3 on).
	MsgSubmitMany MessageType = 36
)

// maxBatch bounds the number of commands one entry may carry, so a corrupt
// length prefix cannot make Apply allocate without limit.
const maxBatch = 1 << 16

// ErrUnknownCommand is returned for a message type this replica cannot
// apply and that is not flagged as ignorable.
var ErrUnknownCommand = errors.New("unknown command type")

// ErrMalformedCommand is returned for an entry that cannot be decoded.
var ErrMalformedCommand = errors.New("malformed command")

// CommandForms is the newest version of the command forms this build
// reads: every command's second byte is the version of its form. Each
// command has one form (codec.go), written with the version it was
// introduced in, and a replica refuses a command of a version it does
// not read rather than misreading it. Every server records the forms it
// reads (Server.CommandForms), the leader refuses a server that would
// join a cluster with older forms, and the leader writes a command of a
// newer form only once every server's record says it reads that form
// (during a rolling upgrade the old servers still read everything the
// leader writes). A build that changes a form gives it the next version
// and keeps reading the one before.
//
// Forms 1 is the first release's; forms 2 adds MsgAttemptRun; forms 3
// adds MsgExplainMany and MsgSubmitMany; forms 4 adds no command and
// reads snapshot version 2 (snapshot_framed.go), which the replicas write
// once every server reads it.
const CommandForms = 4

// baseForms is the version of the forms every command unchanged since
// the first release is written in.
const baseForms = 1

// FormsAttemptRun is the forms version that introduced MsgAttemptRun: a
// leader writes it only when every server reads it.
const FormsAttemptRun = 2

// FormsExplainMany and FormsSubmitMany are the forms version that
// introduced MsgExplainMany and MsgSubmitMany.
const (
	FormsExplainMany = 3
	FormsSubmitMany  = 3
)

// FormsFramedSnapshot is the forms version from which a server reads
// snapshot version 2 (snapshot_framed.go).
const FormsFramedSnapshot = 4

// EveryServerReads reports whether every server of the cluster's server
// table records that it reads the given command forms: until then (a
// rolling upgrade under way, or no server recorded yet) only the older
// forms are written, commands and snapshots alike.
func (s *State) EveryServerReads(forms int) bool {
	n, all := 0, true
	s.st.servers.Ascend(func(v *Server) bool {
		n++
		all = v.CommandForms >= forms
		return all
	})
	return n > 0 && all
}

// Encode builds one command: type byte, version byte, payload in the
// command's one form (the binary form for the commands every task goes
// through, JSON for the others).
func Encode(t MessageType, payload any) ([]byte, error) {
	c, ok := commandOf(t)
	if !ok || c.apply == nil {
		return nil, fmt.Errorf("encode: %w %s", ErrUnknownCommand, t)
	}
	if c.form == formBinary {
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
		case AttemptRunRequest:
			if t == MsgAttemptRun {
				return EncodeAttemptRun(p), nil
			}
		case ExplainManyRequest:
			if t == MsgExplainMany {
				return EncodeExplainMany(p), nil
			}
		case SubmitManyRequest:
			if t == MsgSubmitMany {
				return EncodeSubmitMany(p), nil
			}
		}
		return nil, fmt.Errorf("encode %s: a %T is not its request", t, payload)
	}
	body, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", t, err)
	}
	buf := make([]byte, 2, 2+len(body))
	buf[0] = byte(t)
	buf[1] = baseForms
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
	buf[1] = CommandForms
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
	version   byte // the command forms it was written in
}

// decodeHeader splits an entry into its header and payload. A version
// other than CommandForms is refused: this build reads one.
func decodeHeader(buf []byte) (header, []byte, error) {
	if len(buf) < 2 {
		return header{}, nil, fmt.Errorf("%w: entry of %d bytes is shorter than its header", ErrMalformedCommand, len(buf))
	}
	t := MessageType(buf[0])
	h := header{typ: t &^ IgnoreUnknownFlag, ignorable: t&IgnoreUnknownFlag != 0, version: buf[1]}
	if h.version < baseForms || h.version > CommandForms {
		return h, nil, fmt.Errorf("%w: %s in command forms %d; this build reads forms %d to %d", ErrMalformedCommand, h.typ, h.version, baseForms, CommandForms)
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
	if c, ok := commandOf(t); ok {
		return c.name
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
	// decoded from (nil when it was built in memory, as in tests): the
	// interner's key for the shape.
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
	// current one (see TaskShape.Speculative).
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
	// keeps its attempt.
	OnlyReserved bool `json:"-"`
	// InputUnavailable marks a LOST end whose attempt could not fetch an
	// input from any live node: neither the task's fault nor the node's,
	// it uses none of the task's attempts and counts against no node.
	InputUnavailable bool `json:"-"`
}

// AttemptRunRequest records an attempt that ran and ended before its
// start was committed: it applies as its start at StartedAt followed by
// its end, in one command where two were written before forms 2.
type AttemptRunRequest struct {
	End       AttemptEndRequest
	StartedAt time.Time
}

// AttemptRunResult answers an AttemptRunRequest: the start's outcome
// (its result, or the error a separate start would have got) and the
// end's result.
type AttemptRunResult struct {
	Start    *AttemptResult
	StartErr error
	End      *AttemptResult
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

// SubmitManyRequest submits Tasks in order, as a submit-task command for
// each in one entry would, each with its own result (a BatchResult); every
// task is submitted at SubmittedAt (the tasks' own times are not written).
type SubmitManyRequest struct {
	SubmittedAt time.Time
	Tasks       []SubmitTaskRequest
}

// ExplainManyRequest records that the pending tasks TaskIDs wait for one
// reason, as an ExplainRequest for each would; a task that is gone or no
// longer pending is passed over.
type ExplainManyRequest struct {
	Summary string    `json:"summary"`
	Now     time.Time `json:"now"`
	TaskIDs []string  `json:"task_ids"`
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
