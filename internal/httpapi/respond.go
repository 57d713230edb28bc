package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"herd/api"
	"io"
	"net/http"
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
		return describeDecodeError(err)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		return badRequest("request body must hold exactly one JSON value")
	}
	return nil
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
