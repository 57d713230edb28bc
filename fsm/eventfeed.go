package fsm

import "sort"

// EventTopic says which kind of record a streamed event belongs to.
type EventTopic uint8

// The topics of the event stream.
const (
	TopicTask EventTopic = iota + 1
	TopicNode
	TopicJob
)

var eventTopicNames = [...]string{TopicTask: "task", TopicNode: "node", TopicJob: "job"}

// String is the topic's name.
func (t EventTopic) String() string {
	if int(t) < len(eventTopicNames) {
		return eventTopicNames[t]
	}
	return ""
}

// EventTopicOf returns the topic named name.
func EventTopicOf(name string) (EventTopic, bool) {
	for t, n := range eventTopicNames {
		if n == name && t != 0 {
			return EventTopic(t), true
		}
	}
	return 0, false
}

// StreamEvent is one timeline or node event in the order it was applied:
// the event of record Key (a task, node or job id) in Topic, at position
// Offset among the events of its Raft index, and the record's state once
// the entry added it (a task's or job's state, a node's liveness). (Index,
// Offset) orders the stream and is the same on every replica, since Apply
// is deterministic.
type StreamEvent struct {
	Topic  EventTopic
	Offset uint32
	Key    string
	State  string
	Event  TimelineEvent
}

// EventPosition is a place in the event stream: the event at Offset of
// Index, or the first one after it.
type EventPosition struct {
	Index  uint64
	Offset uint32
}

func (p EventPosition) less(q EventPosition) bool {
	return p.Index < q.Index || p.Index == q.Index && p.Offset < q.Offset
}

func (e *StreamEvent) position() EventPosition {
	return EventPosition{Index: e.Event.Index, Offset: e.Offset}
}

// eventKeep is how many events the stream keeps at least. It is not
// replicated state: each store builds its own from what it applies, so
// a replica that restored a snapshot streams from there on. A reader
// resuming further back is told what it missed.
const eventKeep = 1 << 13

// applying is the index of the entry being applied, if one is.
func (s *store) applying() (uint64, bool) {
	if s.w == nil || s.w.index == 0 {
		return 0, false
	}
	return s.w.index, true
}

// recordGained records the events a timeline gained at the entry being
// applied: the trailing events of cur at that index that old did not
// have.
func (s *store) recordGained(topic EventTopic, key, state string, old, cur []TimelineEvent) {
	if index, ok := s.applying(); ok {
		if added := trailingAt(cur, index) - trailingAt(old, index); added > 0 {
			s.recordEvents(topic, key, state, cur[len(cur)-added:])
		}
	}
}

// recordEvents appends to the stream the events a record gained at the
// entry being applied. Records only gain events at their end
// (appendEvent), so the callers find them by comparing the counts of
// trailing events at the index before and after.
func (s *store) recordEvents(topic EventTopic, key, state string, added []TimelineEvent) {
	index := s.w.index
	var offset uint32
	if k := len(s.events); k > 0 && s.events[k-1].Event.Index == index {
		offset = s.events[k-1].Offset + 1
	}
	for _, ev := range added {
		s.events = append(s.events, StreamEvent{Topic: topic, Offset: offset, Key: key, State: state, Event: ev})
		offset++
	}
	if len(s.events) >= 2*eventKeep {
		// Keep whole indexes: a reader told that the stream starts at an
		// index must find all of that index's events.
		drop := len(s.events) - eventKeep
		for drop < len(s.events) && s.events[drop].Offset != 0 {
			drop++
		}
		s.eventsFrom = s.events[drop-1].Event.Index + 1
		s.events = append(make([]StreamEvent, 0, 2*eventKeep), s.events[drop:]...)
	}
	s.touch(topicEvents)
}

func trailingAt(events []TimelineEvent, index uint64) int {
	n := 0
	for i := len(events) - 1; i >= 0 && events[i].Index == index; i-- {
		n++
	}
	return n
}

// EventsFrom returns the events of this view at or after from, in order,
// about limit of them (0: no limit; a page ends with a whole index), and the position to read from next.
// complete is the first index from which this view holds every event
// (events of earlier indexes were applied before this replica's feed
// began, or trimmed); a reader asking for less than it missed those.
// With ws, it also adds a channel that closes once events are added
// after this view.
func (s *State) EventsFrom(from EventPosition, limit int, ws WatchSet) (events []StreamEvent, next EventPosition, complete uint64) {
	s.watch(ws, topicEvents)
	all := s.st.events
	i := sort.Search(len(all), func(i int) bool { return !all[i].position().less(from) })
	events = all[i:]
	if limit > 0 && len(events) > limit {
		// A page ends with a whole index, so that a reader sees each
		// entry's changes together.
		n := limit
		for n < len(events) && events[n].Event.Index == events[n-1].Event.Index {
			n++
		}
		events = events[:n]
	}
	next = from
	if k := len(events); k > 0 {
		last := events[k-1].position()
		next = EventPosition{Index: last.Index, Offset: last.Offset + 1}
	} else if s.index+1 > from.Index {
		// Nothing at or after from up to this view: the next event can
		// only come with a later entry.
		next = EventPosition{Index: s.index + 1}
	}
	return events, next, max(s.st.eventsFrom, 1)
}
