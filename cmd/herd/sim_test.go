package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"herd/cmd/herd/internal/sim"
)

// herd sim runs a scenario and its oracle and prints the judgements;
// -json writes the report; bad input is a usage error naming it.
func TestSimCommand(t *testing.T) {
	dir := t.TempDir()
	sc := sim.Small()
	sc.Duration = sim.Duration(3 * time.Minute)
	b, _ := json.Marshal(sc)
	file := filepath.Join(dir, "three-minutes.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(dir, "report.json")
	e, out, errb := testEnv(nil)
	if code := run(e, []string{"sim", "-scenario", file, "-seed", "7", "-json", report}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"scenario small (seed 7)", "KIND", "black_hole", "makespan", "oracle"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	var rep sim.Report
	if b, err := os.ReadFile(report); err != nil || json.Unmarshal(b, &rep) != nil || rep.Seed != 7 || rep.Tasks == 0 || rep.OracleMakespan == 0 {
		t.Fatalf("report file: %+v (%v)", rep, err)
	}
	bad := filepath.Join(dir, "settings.json")
	os.WriteFile(bad, []byte(`{"black_hole_failure": 2}`), 0o600)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "-scenario", "huge"}, `scenario "huge": want small, mixed or a JSON file`},
		{[]string{"sim", "-settings", bad}, `unknown field "black_hole_failure"`},
		{[]string{"sim", "-scenario", filepath.Join(dir, "missing.json")}, "read scenario"},
		{[]string{"sim", "extra"}, "sim takes no arguments"},
	} {
		e, _, errb := testEnv(nil)
		if code := run(e, c.args); code == 0 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, %q, want %q", c.args, code, errb.String(), c.want)
		}
	}
}
