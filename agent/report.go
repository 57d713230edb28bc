package agent

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"

	"herd/api"
)

// reportSenders is how many report batches an agent has in flight at once.
const reportSenders = 2

// reporter sends the agent's starts and results to the cluster in batches:
// whatever accumulated while a sender's previous batch was in flight goes
// in its next one. A busy agent then makes one request (and the cluster
// one Raft entry) for many reports; an idle one sends each at once.
type reporter struct {
	client *api.Client
	queue  chan *pendingReport
	// single is set once a server answered that it has no batch endpoint
	// (an older version): reports then go one request each.
	single atomic.Bool
}

type pendingReport struct {
	item api.AttemptReportItem
	done chan reportAnswer // buffered: a sender never waits on a caller
}

type reportAnswer struct {
	report api.AttemptReport
	err    error
}

func newReporter(client *api.Client) *reporter {
	return &reporter{client: client, queue: make(chan *pendingReport, api.MaxReportBatch)}
}

// run sends batches until ctx ends.
func (r *reporter) run(ctx context.Context) {
	done := make(chan struct{})
	for range reportSenders {
		go func() {
			defer func() { done <- struct{}{} }()
			r.sender(ctx)
		}()
	}
	for range reportSenders {
		<-done
	}
}

func (r *reporter) sender(ctx context.Context) {
	for {
		var batch []*pendingReport
		select {
		case <-ctx.Done():
			return
		case p := <-r.queue:
			batch = append(batch, p)
		}
	drain:
		for len(batch) < api.MaxReportBatch {
			select {
			case p := <-r.queue:
				batch = append(batch, p)
			default:
				break drain
			}
		}
		r.send(ctx, batch)
	}
}

// send delivers one batch and answers each report: its own result, or the
// batch's error when the request as a whole failed.
func (r *reporter) send(ctx context.Context, batch []*pendingReport) {
	if r.single.Load() {
		for _, p := range batch {
			p.done <- r.sendOne(ctx, p.item)
		}
		return
	}
	items := make([]api.AttemptReportItem, len(batch))
	for i, p := range batch {
		items[i] = p.item
	}
	results, err := r.client.ReportAttempts(ctx, items)
	var se *api.StatusError
	if errors.As(err, &se) && (se.Code == http.StatusNotFound || se.Code == http.StatusMethodNotAllowed) {
		r.single.Store(true)
		r.send(ctx, batch)
		return
	}
	for i, p := range batch {
		switch {
		case err != nil:
			p.done <- reportAnswer{err: err}
		case results[i].Report != nil:
			p.done <- reportAnswer{report: *results[i].Report}
		default:
			p.done <- reportAnswer{err: results[i].Err()}
		}
	}
}

func (r *reporter) sendOne(ctx context.Context, item api.AttemptReportItem) reportAnswer {
	var a reportAnswer
	if item.Start != nil {
		a.report, a.err = r.client.StartAttempt(ctx, item.AttemptID, item.Start.LeaseVersion)
	} else {
		a.report, a.err = r.client.CompleteAttempt(ctx, item.AttemptID, *item.Complete)
	}
	return a
}

// report sends one report with the next batch and waits for its answer.
func (r *reporter) report(ctx context.Context, item api.AttemptReportItem) (api.AttemptReport, error) {
	p := &pendingReport{item: item, done: make(chan reportAnswer, 1)}
	select {
	case r.queue <- p:
	case <-ctx.Done():
		return api.AttemptReport{}, ctx.Err()
	}
	select {
	case a := <-p.done:
		return a.report, a.err
	case <-ctx.Done():
		return api.AttemptReport{}, ctx.Err()
	}
}
