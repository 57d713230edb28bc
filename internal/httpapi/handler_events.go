package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"herd/api"
	"net/http"
	"strconv"
	"time"
)

// EventBackend serves the event stream: the timeline and node events in
// the order the replica applied them.
type EventBackend interface {
	// ReadEvents returns the events at or after q.From that match q.
	ReadEvents(q api.EventQuery) (EventPage, error)
}

// EventPage is one read of the stream.
type EventPage struct {
	Events []api.Event
	// Next is where the following read starts.
	Next api.EventPosition
	// Complete is the first index from which the replica holds every
	// event: it applied earlier ones before it last restored a snapshot
	// or started, or has let them go.
	Complete uint64
	// Wait blocks until events may have been added after this read, or
	// ctx ends.
	Wait func(ctx context.Context) error
}

// eventHeartbeat is how often an idle stream sends an empty line ({}) so
// that both ends notice a dead connection.
const eventHeartbeat = 10 * time.Second

func (h *Handler) eventRoutes() []route {
	return []route{
		{http.MethodGet, "/v1/events", local, capRead, h.getEvents},
	}
}

// getEvents streams events as newline-delimited JSON from ?index=N
// (&offset=K), of ?topic=…, following new ones unless follow=false.
func (h *Handler) getEvents(w http.ResponseWriter, r *http.Request) (any, error) {
	q, follow, err := parseEventQuery(r)
	if err != nil {
		return nil, err
	}
	asked := q.From
	page, err := h.backend.ReadEvents(q)
	if err != nil {
		return nil, err
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	// From index 0 means from the oldest event kept: nothing is missing.
	// Past the first read, the position only falls behind what is kept
	// when the replica let events go before this reader got them.
	checkLost := asked.Index > 0
	ctx := r.Context()
	for {
		if checkLost && q.From.Index < page.Complete {
			gap := api.EventLost{Lost: api.EventGap{FromIndex: q.From.Index, ToIndex: page.Complete - 1},
				Message: fmt.Sprintf("events of indexes %d to %d are no longer kept by this server", q.From.Index, page.Complete-1)}
			if err := enc.Encode(gap); err != nil {
				return written, nil
			}
		}
		p := PrincipalOf(r.Context())
		for _, ev := range page.Events {
			if !h.mayReadEvent(p, ev) {
				continue
			}
			if err := enc.Encode(ev); err != nil {
				return written, nil
			}
		}
		if flusher != nil {
			flusher.Flush()
		}
		checkLost = true
		moved := page.Next != q.From
		q.From = page.Next
		if len(page.Events) == 0 && !moved {
			if !follow {
				return written, nil
			}
			if err := waitOrBeat(ctx, page.Wait, w, flusher); err != nil {
				return written, nil
			}
		}
		if page, err = h.backend.ReadEvents(q); err != nil {
			h.logger.Warn("event stream ended", "error", err)
			return written, nil
		}
	}
}

// waitOrBeat waits for new events, writing a heartbeat line each time the
// stream has been idle for eventHeartbeat; an error ends the stream.
func waitOrBeat(ctx context.Context, wait func(context.Context) error, w http.ResponseWriter, flusher http.Flusher) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, eventHeartbeat)
		err := wait(wctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		if _, err := w.Write([]byte("{}\n")); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

func parseEventQuery(r *http.Request) (api.EventQuery, bool, error) {
	v := r.URL.Query()
	var q api.EventQuery
	if s := v.Get("index"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return q, false, badRequest("index %q must be a Raft index (a number)", s)
		}
		q.From.Index = n
	}
	if s := v.Get("offset"); s != "" {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return q, false, badRequest("offset %q must be a number", s)
		}
		q.From.Offset = uint32(n)
	}
	for _, s := range v["topic"] {
		fs, err := api.ParseEventTopics(s)
		if err != nil {
			return q, false, badRequest("%v", err)
		}
		q.Topics = append(q.Topics, fs...)
	}
	follow := true
	if s := v.Get("follow"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return q, false, badRequest("follow %q must be true or false", s)
		}
		follow = b
	}
	return q, follow, nil
}
