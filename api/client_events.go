package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// EventLine is one line of the event stream: an event, or (Lost set) the
// news that the replica no longer keeps some of the events asked for.
type EventLine struct {
	Event
	Lost *EventGap `json:"lost,omitempty"`
}

// eventQueryValues is the query string of an event read.
func eventQueryValues(q EventQuery, follow bool) url.Values {
	v := url.Values{}
	if q.From.Index > 0 {
		v.Set("index", strconv.FormatUint(q.From.Index, 10))
	}
	if q.From.Offset > 0 {
		v.Set("offset", strconv.FormatUint(uint64(q.From.Offset), 10))
	}
	var topics []string
	for _, f := range q.Topics {
		if f.Key != "" {
			topics = append(topics, f.Topic+":"+f.Key)
		} else {
			topics = append(topics, f.Topic)
		}
	}
	if len(topics) > 0 {
		v.Set("topic", strings.Join(topics, ","))
	}
	if !follow {
		v.Set("follow", "false")
	}
	return v
}

// Events reads the event stream from q.From, calling fn for each line in
// order. Without follow it returns once the replica has sent what it
// holds. With follow it keeps reading, and when a connection drops or a
// replica goes away it resumes just past the last event fn saw, on the
// same or another replica, so fn sees every event once and in order; it
// returns when ctx ends, fn fails, or the request is refused (a 4xx).
func (c *Client) Events(ctx context.Context, q EventQuery, follow bool, fn func(EventLine) error) error {
	hc := &http.Client{Transport: c.http.Transport} // a stream has no overall timeout
	start := int(c.preferred.Load())
	for round := 0; ; round++ {
		base := c.addrs[(start+round)%len(c.addrs)]
		progressed, err := c.readEvents(ctx, hc, base, &q, follow, fn)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		}
		var ce callbackError
		if errors.As(err, &ce) {
			return ce.err
		}
		var se *StatusError
		if errors.As(err, &se) && se.Code < 500 {
			return err
		}
		if !follow && round+1 >= len(c.addrs)*(c.Retries+1) {
			return err
		}
		if c.OnFailover != nil && len(c.addrs) > 1 {
			c.OnFailover(base, c.addrs[(start+round+1)%len(c.addrs)], err)
		}
		if progressed {
			round = -1 // a fresh connection: give every address its turn again
			start = (start + 1) % len(c.addrs)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(c.RetryWait):
		}
	}
}

// callbackError carries an error of the caller's fn out of a read.
type callbackError struct{ err error }

func (e callbackError) Error() string { return e.err.Error() }

// readEvents reads one connection's worth of the stream, moving q.From
// past each event handed to fn; progressed says whether any was.
func (c *Client) readEvents(ctx context.Context, hc *http.Client, base string, q *EventQuery, follow bool, fn func(EventLine) error) (progressed bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/events?"+eventQueryValues(*q, follow).Encode(), nil)
	if err != nil {
		return false, fmt.Errorf("build request: %w", err)
	}
	if c.token != "" {
		req.Header.Set(HeaderToken, c.token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("GET %s/v1/events: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return false, decodeError(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if err := ctx.Err(); err != nil {
			return progressed, err // nothing reaches fn once ctx ends
		}
		raw := sc.Bytes()
		if len(raw) == 0 || string(raw) == "{}" {
			continue // a heartbeat
		}
		var line EventLine
		if err := json.Unmarshal(raw, &line); err != nil {
			return progressed, fmt.Errorf("decode event from %s: %w", base, err)
		}
		if err := fn(line); err != nil {
			return progressed, callbackError{err}
		}
		if line.Lost == nil {
			q.From = line.Position().After()
			progressed = true
		}
	}
	if err := sc.Err(); err != nil {
		return progressed, fmt.Errorf("read events from %s: %w", base, err)
	}
	if follow {
		return progressed, fmt.Errorf("event stream from %s ended", base)
	}
	return progressed, nil
}
