package test

import (
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"
	"time"
)

var (
	chaosSchedules = flag.Int("chaos.schedules", 2, "chaos schedules to run (each a fresh cluster)")
	chaosDuration  = flag.Duration("chaos.duration", 6*time.Second, "fault phase of each chaos schedule")
	chaosSeed      = flag.Uint64("chaos.seed", 0, "seed of the first schedule (0: from the clock); schedule i uses seed+i")
	chaosOut       = flag.String("chaos.out", "", "directory for failing histories and porcupine's HTML (default: the test's artifact directory)")
	chaosReport    = flag.String("chaos.report", "", "file the campaign's running total is written to as JSON after every schedule")
	chaosMerge     = flag.String("chaos.merge", "", "comma-separated -chaos.report files: print their merged table instead of running")
	chaosSecure    = flag.String("chaos.secure", "alternate", "TLS and ACLs on every schedule (all), none, or every second one (alternate)")
)

// TestChaos runs seeded fault schedules against a 3-replica cluster with
// agents and checks the promise after each: see test/README.md. The short
// default runs in every `go test ./...`; a campaign is
//
//	go test ./test -run Chaos -chaos.schedules=200 -chaos.duration=60s -timeout 0 -v
//
// A campaign may be split across processes (each with its own -chaos.seed
// and -chaos.report); -chaos.merge then prints the table of all of them.
func TestChaos(t *testing.T) {
	if *chaosMerge != "" {
		total := newReport()
		for _, f := range strings.Split(*chaosMerge, ",") {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			r := newReport()
			if err := json.Unmarshal(b, r); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			total.Merge(r)
		}
		var b strings.Builder
		total.Table(&b)
		os.Stdout.WriteString(b.String())
		return
	}
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano() % 1_000_000)
	}
	total := newReport()
	for i := 0; i < *chaosSchedules; i++ {
		s := seed + uint64(i)
		var rep *ChaosReport
		ok := t.Run("seed="+itoa(s), func(t *testing.T) {
			secure := *chaosSecure == "all" || (*chaosSecure == "alternate" && i%2 == 1)
			rep = RunChaos(t, ChaosConfig{Seed: s, Duration: *chaosDuration, OutDir: *chaosOut, Secure: secure})
			for checker, found := range rep.Anomalies {
				for _, a := range found {
					t.Errorf("%s: %s", checker, a)
				}
			}
			if rep.AnomalyCount() > 0 {
				t.Logf("reproduce: go test ./test -run 'TestChaos' -chaos.seed=%d -chaos.schedules=1 -chaos.duration=%v", s, *chaosDuration)
			}
		})
		if rep != nil {
			total.Merge(rep)
		}
		if *chaosReport != "" {
			b, err := json.Marshal(total)
			if err == nil {
				err = os.WriteFile(*chaosReport, b, 0o644)
			}
			if err != nil {
				t.Fatalf("writing the campaign report: %v", err)
			}
		}
		if !ok && testing.Short() {
			break
		}
	}
	var b strings.Builder
	total.Table(&b)
	t.Logf("chaos campaign, first seed %d, %v per schedule:\n%s", seed, *chaosDuration, b.String())
	if *chaosSchedules > 2 {
		os.Stdout.WriteString(b.String())
	}
}

func itoa(u uint64) string {
	var buf [20]byte
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + u%10)
		u /= 10
		if u == 0 {
			return string(buf[i:])
		}
	}
}
