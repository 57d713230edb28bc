package api

import (
	"fmt"
	"strings"
	"time"
)

// EventPosition is a place in the event stream: the event at Offset of
// Raft index Index, or the first one after it. Every replica numbers the
// events alike, so a reader resumes at its position on any of them.
type EventPosition struct {
	Index  uint64 `json:"index"`
	Offset uint32 `json:"offset"`
}

// Before says whether p comes before q in the stream.
func (p EventPosition) Before(q EventPosition) bool {
	return p.Index < q.Index || p.Index == q.Index && p.Offset < q.Offset
}

// After is the position just past p's event.
func (p EventPosition) After() EventPosition {
	return EventPosition{Index: p.Index, Offset: p.Offset + 1}
}

// EventQuery selects events: from a position, of some topics (none: all),
// at most Limit of them (0: the backend's page size).
type EventQuery struct {
	From   EventPosition
	Topics []EventTopicFilter
	Limit  int
}

// EventTopicFilter matches the events of a topic ("task", "node", "job"),
// of one record when Key is set.
type EventTopicFilter struct {
	Topic string
	Key   string
}

// Matches reports whether an event passes the filters (no filter: every
// event does).
func (q EventQuery) Matches(topic, key string) bool {
	if len(q.Topics) == 0 {
		return true
	}
	for _, f := range q.Topics {
		if f.Topic == topic && (f.Key == "" || f.Key == key) {
			return true
		}
	}
	return false
}

// Event is one line of the event stream.
type Event struct {
	Index  uint64 `json:"index"`
	Offset uint32 `json:"offset"`
	Topic  string `json:"topic"`
	Key    string `json:"key"`
	// State is the record's state once the entry applied: a task's or
	// job's state, a node's liveness.
	State   string    `json:"state,omitempty"`
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Message string    `json:"message"`
}

// Position is where the event is in the stream.
func (e Event) Position() EventPosition { return EventPosition{Index: e.Index, Offset: e.Offset} }

// EventLost is the stream line telling a reader that events it asked for
// are no longer kept by the replica answering.
type EventLost struct {
	Lost    EventGap `json:"lost"`
	Message string   `json:"message"`
}

// EventGap is the range of indexes whose events were not sent.
type EventGap struct {
	FromIndex uint64 `json:"from_index"`
	ToIndex   uint64 `json:"to_index"`
}

// ParseEventTopics reads a topic list: "task,node:n1,job:j-1".
func ParseEventTopics(v string) ([]EventTopicFilter, error) {
	var out []EventTopicFilter
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		topic, key, _ := strings.Cut(part, ":")
		switch topic {
		case "task", "node", "job":
		default:
			return nil, fmt.Errorf("unknown event topic %q (want task, node or job, optionally :ID)", topic)
		}
		out = append(out, EventTopicFilter{Topic: topic, Key: key})
	}
	return out, nil
}
