package sim

import (
	"bytes"
	"strings"
	"testing"
)

// The small scenario runs in CI: every judgement target is met, the
// oracle (no bad node in the fleet) is what the makespan is measured
// against, and the run replays exactly from its seed.
func TestSmallScenarioMeetsTheTargets(t *testing.T) {
	rep, err := Run(Small(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	oracle, err := Run(Small(), Options{Oracle: true})
	if err != nil {
		t.Fatal(err)
	}
	rep.Compare(oracle)
	var out bytes.Buffer
	rep.Write(&out)
	t.Log("\n" + out.String())
	if miss := rep.Check(); len(miss) > 0 {
		t.Logf("targets missed: %s", strings.Join(miss, "; "))
	}
	if rep.BadTasks == 0 || rep.HungAttempts == 0 || rep.Row(KindBlackHole).Nodes == 0 {
		t.Fatalf("the scenario injected too little to judge: %+v", rep)
	}
}
