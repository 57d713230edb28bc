package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"herd/cmd/herd/internal/sim"
	"herd/fsm"
)

// runSim is `herd sim`: the judgement simulator over a built-in scenario
// or a scenario file, with the default profile settings or a site's.
func runSim(e *env, args []string) error {
	fs := newFlags(e, "sim", "[-scenario small|mixed|FILE] [-seed N] [-settings FILE] [-json FILE]",
		"Run a simulated fleet with injected truths (slow nodes, black holes, hung nodes, bad tasks)\n"+
			"through the real scheduler and FSM on a simulated clock, and score every judgement:\n"+
			"nodes rightly or wrongly quarantined and demoted, black holes missed and how fast each\n"+
			"was caught, hung attempts flagged, tasks blamed, and the makespan against an oracle\n"+
			"that never places work on a bad node. No process, socket or disk is used.")
	scenario := fs.String("scenario", "small", "a built-in scenario (small: 30 nodes, 20 min; mixed: 200 nodes, 2 h) or a JSON scenario file")
	seed := fs.Uint64("seed", 0, "override the scenario's seed (0: keep it)")
	settings := fs.String("settings", "", "a JSON file of profile settings to judge with (fsm.ProfileSettings field names, e.g. {\"black_hole_failures\": 4}; the rest keep their defaults)")
	jsonOut := fs.String("json", "", "also write the report as JSON to this file")
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("sim takes no arguments: name the scenario with -scenario")
	}
	sc, ok := sim.Builtin(*scenario)
	if !ok {
		if strings.ContainsAny(*scenario, "/.") {
			var err error
			if sc, err = sim.Load(*scenario); err != nil {
				return err
			}
		} else {
			return usagef("scenario %q: want small, mixed or a JSON file", *scenario)
		}
	}
	if *seed != 0 {
		sc.Seed = *seed
	}
	var opt sim.Options
	if *settings != "" {
		b, err := os.ReadFile(*settings)
		if err != nil {
			return fmt.Errorf("read settings: %w", err)
		}
		ps := fsm.DefaultProfileSettings()
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ps); err != nil {
			return usagef("settings %s: %v", *settings, err)
		}
		if err := ps.Validate(); err != nil {
			return usagef("settings %s: %v", *settings, err)
		}
		opt.Settings = &ps
	}
	fmt.Fprintf(e.stderr, "sim: running %s (seed %d) and its oracle…\n", sc.Name, sc.Seed)
	rep, err := sim.Run(sc, opt)
	if err != nil {
		return err
	}
	opt.Oracle = true
	oracle, err := sim.Run(sc, opt)
	if err != nil {
		return err
	}
	rep.Compare(oracle)
	rep.Write(e.stdout)
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", *jsonOut, err)
		}
	}
	return nil
}
