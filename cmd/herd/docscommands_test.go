package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// inlineCommand is a `herd …` span of prose or a table.
var inlineCommand = regexp.MustCompile("`((?:go run ./cmd/herd|herd) [^`]+)`")

// flagWithType is a flag of a command's help and the type of its value,
// empty for a boolean.
var flagWithType = regexp.MustCompile(`(?m)^  (-[a-zA-Z0-9-]+)(?: ([a-z]\S*))?(?:\t|$)`)

// docCommand is one herd command line the docs show, and where.
type docCommand struct {
	where, line string
}

// docCommands are the herd command lines of the README, examples/README.md
// and docs/*.md: in their sh blocks (continuations joined, comments
// dropped, each command of a pipeline or list) and in backticks.
func docCommands(t *testing.T) []docCommand {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md", "../../examples/README.md")
	var out []docCommand
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(f, "../../")
		inBlock := false
		pending := ""
		for i, line := range strings.Split(string(raw), "\n") {
			where := name + ":" + strconv.Itoa(i+1)
			switch {
			case strings.HasPrefix(line, "```"):
				inBlock = strings.HasPrefix(line, "```sh")
				continue
			case inBlock:
				line = pending + strings.TrimSpace(line)
				if strings.HasSuffix(line, `\`) {
					pending = strings.TrimSuffix(line, `\`) + " "
					continue
				}
				pending = ""
				if i := strings.Index(line, " #"); i >= 0 {
					line = line[:i]
				}
				for _, part := range regexp.MustCompile(`\|\s|;\s|&&|\$\(|\)`).Split(line, -1) {
					if cmd := herdCommand(part); cmd != "" {
						out = append(out, docCommand{where, cmd})
					}
				}
			default:
				for _, m := range inlineCommand.FindAllStringSubmatch(line, -1) {
					out = append(out, docCommand{where, herdCommand(strings.ReplaceAll(m[1], `\|`, "|"))})
				}
			}
		}
	}
	return out
}

// herdCommand is part as a herd command line without its program name's
// spelling (go run ./cmd/herd is herd), or "" if it is not one.
func herdCommand(part string) string {
	part = strings.TrimSpace(part)
	for _, p := range []string{"xargs -n1 ", "timeout 2 "} {
		part = strings.TrimPrefix(part, p)
	}
	if rest, ok := strings.CutPrefix(part, "go run ./cmd/herd "); ok {
		return "herd " + rest
	}
	if strings.HasPrefix(part, "herd ") {
		return part
	}
	return ""
}

// Every herd command the docs show exists, and every flag they give it is
// one of its flags: a renamed command or flag fails here, not for the
// reader. (The commands themselves run in the tests of the pages that
// have a cluster to run them against: README, security, configuration,
// examples.)
func TestDocsCommandsExist(t *testing.T) {
	e, _, _ := testEnv(nil)
	helps := map[string]string{}
	help := func(path []string) string {
		key := strings.Join(path, " ")
		if h, ok := helps[key]; ok {
			return h
		}
		h := helpOf(e, path)
		helps[key] = h
		return h
	}
	cmds := docCommands(t)
	if len(cmds) < 50 {
		t.Fatalf("found %d herd commands in the docs; the extraction is broken", len(cmds))
	}
	flagsChecked := 0
	for _, c := range cmds {
		words := strings.Fields(c.line)[1:]
		var path []string
		h := help(nil)
		i := 0
		for ; i < len(words); i++ {
			w := words[i]
			if !strings.Contains(h, "Commands:") && !strings.Contains(h, "Subcommands:") {
				break
			}
			var names []string
			for _, m := range listedName.FindAllStringSubmatch(h, -1) {
				names = append(names, m[1])
			}
			if len(path) == 0 && (w == agentGuardCommand || w == completeCommand) {
				break // the hidden commands herd runs itself
			}
			if !slices.Contains(names, w) {
				if strings.HasPrefix(w, "-") || strings.ContainsAny(w, "[]|<>…") || strings.ToUpper(w) == w {
					break // a flag or a placeholder: the group itself
				}
				t.Errorf("%s: %q: herd %s has no subcommand %q", c.where, c.line, strings.Join(path, " "), w)
				break
			}
			path = append(path, w)
			h = help(path)
		}
		if len(path) == 0 {
			continue
		}
		// Each flag, and whether it takes a value (its help names a type).
		flags := map[string]bool{"-h": false, "-help": false}
		for _, m := range flagWithType.FindAllStringSubmatch(h, -1) {
			flags[m[1]] = m[2] != ""
		}
		// A command that runs a command line (task submit, task run)
		// takes flags up to its first argument only.
		stopsAtArgument := commandLineCommands[strings.Join(path, " ")]
		takesValue := false
		checked := 0
		for _, word := range words[i:] {
			if word == "--" {
				break
			}
			if takesValue {
				takesValue = false
				continue
			}
			word = strings.Trim(word, "[](),")
			if !strings.HasPrefix(word, "-") || word == "-" || len(word) < 2 || !isLetter(word[1], word) {
				if stopsAtArgument {
					break
				}
				continue
			}
			// -server|-agent|-client: each is a flag.
			for _, w := range strings.Split(word, "|") {
				name, _, hasValue := strings.Cut(strings.TrimPrefix(w, "-"), "=")
				name = "-" + strings.TrimPrefix(name, "-")
				withValue, ok := flags[name]
				if !ok {
					t.Errorf("%s: %q: herd %s has no flag %s", c.where, c.line, strings.Join(path, " "), name)
					continue
				}
				checked++
				takesValue = withValue && !hasValue
			}
		}
		flagsChecked += checked
	}
	t.Logf("%d commands, %d flags checked", len(cmds), flagsChecked)
}

// isLetter reports whether a word's character after its dash starts a
// flag's name (a letter, or a second dash), not a number such as -1.
func isLetter(b byte, w string) bool {
	return b == '-' && len(w) > 2 || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}
