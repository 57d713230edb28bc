package main

import (
	"strings"
	"testing"
)

// leafCommands are the paths of every command that takes no subcommand,
// found by walking the help of each group from the top.
func leafCommands(t *testing.T, e *env) [][]string {
	t.Helper()
	var out [][]string
	var walk func(path []string)
	walk = func(path []string) {
		h := helpOf(e, path)
		if len(path) > 0 && !strings.Contains(h, "Commands:") && !strings.Contains(h, "Subcommands:") {
			out = append(out, path)
			return
		}
		for _, m := range listedName.FindAllStringSubmatch(h, -1) {
			if len(path) == 0 && m[1] == "help" {
				continue
			}
			walk(append(append([]string(nil), path...), m[1]))
		}
	}
	walk(nil)
	if len(out) < 40 {
		t.Fatalf("found %d commands; the walk is broken", len(out))
	}
	return out
}

// Every command that takes arguments reads its flags before and after
// them, as -flag or --flag: -h after an argument and --help before one
// print the command's usage, and a flag with a number or a duration
// given a bad value after an argument is refused as that flag's (it was
// read as a flag, not as an argument). Commands that run a command line
// (task submit, task run) stop at their first argument, and only the
// flags before it are theirs.
func TestEveryCommandTakesFlagsBeforeAndAfterItsArguments(t *testing.T) {
	e, _, _ := testEnv(nil)
	tried, valued := 0, 0
	for _, path := range leafCommands(t, e) {
		name := strings.Join(path, " ")
		h := helpOf(e, path)
		m := usageLine.FindStringSubmatch(h)
		if m == nil || strings.TrimSpace(m[2]) == "" {
			continue // no arguments
		}
		arg := "x1"
		run := func(args ...string) (int, string) {
			e, out, errb := testEnv(nil)
			code := run(e, append(append([]string(nil), path...), args...))
			return code, out.String() + errb.String()
		}
		usage := "Usage: herd " + name
		if code, out := run("--help", arg); code != 0 || !strings.Contains(out, usage) {
			t.Errorf("herd %s --help %s: exit %d, want its usage:\n%s", name, arg, code, out)
		}
		if commandLineCommands[name] {
			continue
		}
		tried++
		if code, out := run(arg, "-h"); code != 0 || !strings.Contains(out, usage) {
			t.Errorf("herd %s %s -h: exit %d, want its usage:\n%s", name, arg, code, out)
		}
		for _, f := range flagWithType.FindAllStringSubmatch(h, -1) {
			if f[2] != "int" && f[2] != "duration" && f[2] != "uint" && f[2] != "float" {
				continue
			}
			valued++
			code, out := run(arg, "-"+strings.TrimPrefix(f[1], "-"), "not-a-number")
			if code != 2 || !strings.Contains(out, "invalid value \"not-a-number\" for flag "+f[1]) {
				t.Errorf("herd %s %s %s not-a-number: exit %d, want the flag's value refused:\n%s", name, arg, f[1], code, out)
			}
			code, out = run(arg, "-"+f[1], "not-a-number") // --flag
			if code != 2 || !strings.Contains(out, "not-a-number") {
				t.Errorf("herd %s %s -%s not-a-number: exit %d, want the flag's value refused:\n%s", name, arg, f[1], code, out)
			}
			break
		}
	}
	if tried < 20 {
		t.Fatalf("only %d commands with arguments were tried", tried)
	}
	t.Logf("%d commands with arguments took flags after them, %d a valued flag", tried, valued)
}
