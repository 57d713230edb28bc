package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"herd/api"
	"herd/internal/check"
	"herd/internal/version"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// requestError is an answer decided by the HTTP layer itself (a malformed
// request, a request that could not be forwarded): its status and code
// are sent as they are.
type requestError struct {
	status int
	code   string
	msg    string
}

func (e *requestError) Error() string { return e.msg }

// badRequest is a 400 for a request the handler refuses.
func badRequest(format string, args ...any) error {
	return &requestError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// notApplied is a 503 for a request that was not executed (safe to retry).
func notApplied(msg string) error {
	return &requestError{status: http.StatusServiceUnavailable, code: api.CodeNotApplied, msg: msg}
}

// decodeBody reads a size-limited JSON body into v, refusing unknown
// fields, trailing data and invalid UTF-8 with a 4xx error.
//
// An unknown field sent by a newer build (the client's or the forwarding
// replica's version, see newerPeer) is not the client's mistake but a
// rolling upgrade under way: a server's or agent's own record (the
// routes only servers and agents call) is read without the fields this
// build does not know, as the build that sent it expects of an older
// peer; anything else is refused with a retryable 503 that names the
// field, since this build cannot honour what was asked.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if r.ContentLength > api.MaxRequestBytes {
		// Said up front: refused before a byte of it is read (a client
		// that sent "Expect: 100-continue" then never sends it).
		return describeDecodeError(&http.MaxBytesError{Limit: api.MaxRequestBytes})
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, api.MaxRequestBytes))
	if err != nil {
		return describeDecodeError(err)
	}
	// encoding/json would silently turn invalid UTF-8 into U+FFFD, storing
	// something other than what the client sent: refuse it instead.
	if !utf8.Valid(raw) {
		return badRequest("request body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		field, unknown := strings.CutPrefix(err.Error(), "json: unknown field ")
		newer := newerPeer(r)
		if unknown && newer == "" {
			return unknownField(field, v)
		}
		if !unknown {
			return describeDecodeError(err)
		}
		if !tolerant(r) {
			return notApplied(fmt.Sprintf("this server's build (%s) does not support field %s yet, which a newer build (%s) sent: retry after the upgrade",
				version.Version(), field, newer))
		}
		reflect.ValueOf(v).Elem().SetZero() // the strict pass may have filled part of it
		dec = json.NewDecoder(bytes.NewReader(raw))
		if err := dec.Decode(v); err != nil {
			return describeDecodeError(err)
		}
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		return badRequest("request body must hold exactly one JSON value")
	}
	return nil
}

// unknownField refuses a field the body's type does not have, naming the
// nearest one it has.
func unknownField(quoted string, v any) error {
	return badRequest("%s", check.UnknownField(quoted, v))
}

func describeDecodeError(err error) error {
	var (
		mbe *http.MaxBytesError
		se  *json.SyntaxError
		ute *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mbe):
		return &requestError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("request body larger than %d bytes", mbe.Limit)}
	case errors.Is(err, io.EOF):
		return badRequest("request body is empty; a JSON object is required")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("request body is truncated JSON")
	case errors.As(err, &se):
		return badRequest("malformed JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &ute):
		field := ute.Field
		if field == "" {
			field = "body"
		}
		return badRequest("field %q must be %s, not JSON %s", field, ute.Type, ute.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return badRequest("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return badRequest("invalid request body: %v", err)
}

// prettyWriter marks a response to be indented (?pretty). By default
// answers are compact: agents and the CLI read them by the thousand.
type prettyWriter struct{ http.ResponseWriter }

// Unwrap lets http.ResponseController reach the connection's writer.
func (p prettyWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// statusWriter records whether a streamed answer has started.
type statusWriter struct {
	http.ResponseWriter
	wrote bool
}

func (s *statusWriter) Write(p []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(p)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	if _, pretty := w.(prettyWriter); pretty {
		enc.SetIndent("", "  ")
	}
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, api.ErrorResponse{Error: msg})
}

// writeErr answers an error with its status and body (errorAnswer); a 503
// tells the client when to retry.
func writeErr(w http.ResponseWriter, err error) {
	status, body := errorAnswer(err)
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, body)
}

// errorAnswer maps an error to its HTTP status and body: a requestError
// as it is, a backend error by the sentinel it wraps, keeping its code
// (CodedError) if any.
func errorAnswer(err error) (int, api.ErrorResponse) {
	var re *requestError
	if errors.As(err, &re) {
		return re.status, api.ErrorResponse{Error: re.msg, Code: re.code}
	}
	body := api.ErrorResponse{Error: err.Error()}
	var ce *api.CodedError
	if errors.As(err, &ce) {
		body.Code = ce.Code
	}
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, api.ErrBadRequest):
		status = http.StatusBadRequest
	case errors.Is(err, api.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, api.ErrConflict):
		status = http.StatusConflict
	case errors.Is(err, api.ErrNoLeader), errors.Is(err, api.ErrNotLeader), errors.Is(err, api.ErrUnavailable):
		status = http.StatusServiceUnavailable
	case errors.Is(err, api.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		status = http.StatusGatewayTimeout
	case errors.Is(err, context.Canceled):
		status = 499 // client closed the request
	}
	return status, body
}

// newerPeer returns the version of the newer build behind the request
// (the client's, or the replica's that forwarded it) when it is newer
// than this one, and "" otherwise.
func newerPeer(r *http.Request) string {
	newest := ""
	for _, v := range []string{r.Header.Get(api.HeaderVersion), r.Header.Get(api.HeaderForwardedVersion)} {
		if version.Valid(v) && version.Compare(v, version.Version()) > 0 && (newest == "" || version.Compare(v, newest) > 0) {
			newest = v
		}
	}
	return newest
}

// routeKey holds the route a request is served by in its context.
type routeKey struct{}

// tolerant reports whether the request's route carries a server's or an
// agent's record of itself, which a newer build may extend: the routes
// that only servers and agents (or an operator standing in for them)
// call.
func tolerant(r *http.Request) bool {
	rt, ok := r.Context().Value(routeKey{}).(route)
	if !ok {
		return false
	}
	switch rt.need {
	case capAgent, capServerOrOperator, capAgentOrOperator:
		return true
	}
	return false
}

// submitted answers a submission: 201 with the record's Location when
// this call created it, 200 when its idempotency key named one already.
func submitted(w http.ResponseWriter, location string, created bool, resp any) any {
	if !created {
		return resp
	}
	w.Header().Set("Location", location)
	return reply{http.StatusCreated, resp}
}

// listLimit reads a list's ?limit= (api.DefaultListLimit when absent).
func listLimit(v string) (int, error) {
	if v == "" {
		return api.DefaultListLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > api.MaxListLimit {
		return 0, badRequest("limit %q must be a whole number from 1 to %d", v, api.MaxListLimit)
	}
	return n, nil
}
