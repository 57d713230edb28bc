package bench

import (
	"fmt"
	"time"

	"herd/cmd/herd/internal/sim"
)

// benchJudgement runs the judgement simulator on the size's scenario and
// its oracle, and keeps the report.
func benchJudgement(sz benchSizes, r *Result) error {
	sc, ok := sim.Builtin(sz.judgement)
	if !ok {
		return fmt.Errorf("no scenario %q", sz.judgement)
	}
	start := time.Now()
	rep, err := sim.Run(sc, sim.Options{})
	if err != nil {
		return err
	}
	oracle, err := sim.Run(sc, sim.Options{Oracle: true})
	if err != nil {
		return err
	}
	rep.Compare(oracle)
	r.Judgement, r.JudgementSeconds = rep, time.Since(start).Seconds()
	return nil
}
