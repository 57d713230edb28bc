package httpapi

import (
	"context"
	"errors"
	"fmt"
	"herd/api"
	"net/http"
)

// AttemptBackend takes the agents' reports of their attempts. Every
// method is leader-only.
type AttemptBackend interface {
	StartAttempt(ctx context.Context, id string, req api.AttemptStartRequest) (api.AttemptReport, error)
	CompleteAttempt(ctx context.Context, id string, req api.AttemptCompleteRequest) (api.AttemptReport, error)
	// ReportAttempts commits a validated batch of reports in one entry and
	// answers each (an error only when the batch as a whole failed).
	ReportAttempts(ctx context.Context, reports []api.AttemptReportItem) ([]api.ReportOutcome, error)
}

func (h *Handler) attemptRoutes() []route {
	return []route{
		{http.MethodPost, "/v1/attempts/{id}/start", leaderOnly, capAgent, h.postAttemptStart},
		{http.MethodPost, "/v1/attempts/{id}/complete", leaderOnly, capAgent, h.postAttemptComplete},
		{http.MethodPost, "/v1/attempts/reports", leaderOnly, capAgent, h.postAttemptReports},
	}
}

func (h *Handler) postAttemptStart(w http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "attempt")
	if err != nil {
		return nil, err
	}
	var req api.AttemptStartRequest
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	if err := h.checkAttemptNode(r, "start attempt", id); err != nil {
		return nil, err
	}
	return h.backend.StartAttempt(r.Context(), id, req)
}

func (h *Handler) postAttemptComplete(w http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "attempt")
	if err != nil {
		return nil, err
	}
	var req api.AttemptCompleteRequest
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	if err := validateComplete(&req); err != nil {
		return nil, badRequest("%v", err)
	}
	if err := h.checkAttemptNode(r, "complete attempt", id); err != nil {
		return nil, err
	}
	return h.backend.CompleteAttempt(r.Context(), id, req)
}

// validateComplete checks a result report's fields.
func validateComplete(req *api.AttemptCompleteRequest) error {
	switch {
	case len(req.OutputTail) > api.MaxOutputTail:
		return fmt.Errorf("output_tail is longer than %d bytes", api.MaxOutputTail)
	case len(req.Error) > api.MaxErrorText:
		return fmt.Errorf("error is longer than %d bytes", api.MaxErrorText)
	}
	switch req.State {
	case "", api.AttemptSucceeded, api.AttemptFailed, api.AttemptTimedOut, api.AttemptLost:
		return nil
	}
	return fmt.Errorf("state %q must be SUCCEEDED, FAILED, TIMED_OUT or LOST", req.State)
}

// postAttemptReports takes a batch of starts and results. The batch is
// validated whole (one bad report refuses it all, 400) and then each
// report is answered on its own.
func (h *Handler) postAttemptReports(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.AttemptReportBatch
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	if len(req.Reports) == 0 || len(req.Reports) > api.MaxReportBatch {
		return nil, badRequest("a batch holds 1 to %d reports, not %d", api.MaxReportBatch, len(req.Reports))
	}
	for i, rep := range req.Reports {
		var err error
		switch {
		case !api.ValidID(rep.AttemptID):
			err = fmt.Errorf("%q is not a valid attempt id", rep.AttemptID)
		case (rep.Start == nil) == (rep.Complete == nil):
			err = errors.New("a report has exactly one of start and complete")
		case rep.Complete != nil:
			err = validateComplete(rep.Complete)
		}
		if err != nil {
			return nil, badRequest("report %d: %v", i, err)
		}
	}
	// One report for another node's attempt refuses the batch whole:
	// nothing of it is applied.
	for _, rep := range req.Reports {
		action := "start attempt"
		if rep.Complete != nil {
			action = "complete attempt"
		}
		if err := h.checkAttemptNode(r, action, rep.AttemptID); err != nil {
			return nil, err
		}
	}
	outcomes, err := h.backend.ReportAttempts(r.Context(), req.Reports)
	if err != nil {
		return nil, err
	}
	resp := api.AttemptReportBatchResponse{Results: make([]api.AttemptReportResult, len(outcomes))}
	for i, o := range outcomes {
		if o.Err != nil {
			status, body := errorAnswer(o.Err)
			resp.Results[i] = api.AttemptReportResult{Status: status, Error: body.Error, Code: body.Code}
			continue
		}
		resp.Results[i] = api.AttemptReportResult{Report: &o.Report}
	}
	return resp, nil
}

// checkAttemptNode refuses a node-scoped caller reporting on an attempt
// placed on another node. An attempt the replica does not know is left to
// the backend, which answers it as unknown.
func (h *Handler) checkAttemptNode(r *http.Request, action, id string) error {
	if PrincipalOf(r.Context()).Node == "" {
		return nil
	}
	node, ok := h.backend.AttemptNode(id)
	if !ok {
		return nil
	}
	return h.checkNode(r, node, action, id)
}
