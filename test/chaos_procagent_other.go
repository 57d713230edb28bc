//go:build !unix

package test

import (
	"context"
	"time"

	"herd/agent"
)

// Off Unix there is no agent process to stop or kill: schedules run with
// in-process agents only.
type procAgent struct{}

func (ch *chaos) startProcAgents() []*procAgent { return nil }

func (p *procAgent) pause(time.Duration)          {}
func (p *procAgent) killAndRestart(time.Duration) {}

func (ch *chaos) tickers(context.Context) {}

func (ch *chaos) tickRuns() []agent.RunRecord { return nil }
