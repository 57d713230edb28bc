package cluster

import (
	"context"
	"herd/internal/httpapi"

	"herd/api"
	"herd/fsm"
)

// eventPage is how many events of the stream one read looks at.
const eventPage = 1000

// ReadEvents reads the event stream of this replica's applied state:
// every replica numbers events alike (Apply is deterministic), so a reader
// moves between replicas without loss or repeats, waiting on one that is
// behind until it catches up.
func (s *Server) ReadEvents(q api.EventQuery) (httpapi.EventPage, error) {
	st := s.fsm.State()
	limit := q.Limit
	if limit <= 0 || limit > eventPage {
		limit = eventPage
	}
	ws := fsm.NewWatchSet()
	evs, next, complete := st.EventsFrom(fsm.EventPosition{Index: q.From.Index, Offset: q.From.Offset}, limit, ws)
	page := httpapi.EventPage{
		Next:     api.EventPosition{Index: next.Index, Offset: next.Offset},
		Complete: complete,
		Wait:     func(ctx context.Context) error { return ws.WatchCtx(ctx) },
	}
	for i := range evs {
		e := &evs[i]
		topic := e.Topic.String()
		if !q.Matches(topic, e.Key) {
			continue
		}
		page.Events = append(page.Events, api.Event{
			Index: e.Event.Index, Offset: e.Offset, Topic: topic, Key: e.Key, State: e.State,
			Time: e.Event.Time.Time(), Kind: e.Event.Kind.String(), Message: e.Event.Message,
		})
	}
	return page, nil
}
