package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// completeCommand is the hidden command the shell completion scripts
// call: "herd __complete WORDS… CURRENT" prints the candidates for
// CURRENT, one per line.
const completeCommand = "__complete"

// The completion scripts: each hands the words typed so far to
// herd __complete and offers what it prints.
var completionScripts = map[string]string{
	"bash": `# herd completion for bash: source <(herd completion bash)
_herd() {
	local cur=${COMP_WORDS[COMP_CWORD]}
	local IFS=$'\n'
	COMPREPLY=($(herd __complete "${COMP_WORDS[@]:1:COMP_CWORD-1}" "$cur" 2>/dev/null))
}
complete -o default -F _herd herd
`,
	"zsh": `#compdef herd
# herd completion for zsh: source <(herd completion zsh)
_herd() {
	local -a candidates
	candidates=(${(f)"$(herd __complete ${words[2,CURRENT-1]} ${words[CURRENT]} 2>/dev/null)"})
	compadd -a candidates
}
compdef _herd herd
`,
	"fish": `# herd completion for fish: herd completion fish | source
complete -c herd -f -a '(herd __complete (commandline -opc)[2..-1] (commandline -ct) 2>/dev/null)'
`,
}

func runCompletion(e *env, args []string) error {
	fs := newFlags(e, "completion", "bash|zsh|fish", "Print the shell completion script: commands, subcommands, flags, and the ids\nof tasks, nodes and jobs from the cluster (HERD_ADDR). Load it with\nsource <(herd completion bash), source <(herd completion zsh) or\nherd completion fish | source.")
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 || completionScripts[fs.Arg(0)] == "" {
		return usagef("completion takes one shell: bash, zsh or fish")
	}
	fmt.Fprint(e.stdout, completionScripts[fs.Arg(0)])
	return nil
}

var (
	listedName = regexp.MustCompile(`(?m)^  ([a-z][a-z0-9-]*)\s`)
	flagName   = regexp.MustCompile(`(?m)^  (-[a-zA-Z0-9-]+)`)
	usageLine  = regexp.MustCompile(`(?m)^Usage: herd (.*?) \[flags\] ?(.*)$`)
)

// runComplete prints the candidates for the last word: the subcommands of
// the command the words name, its flags when the word starts with '-',
// or, for a command taking an id, the ids of the cluster's tasks, nodes
// or jobs (asked with a short timeout; none when no cluster answers).
// What a command offers is read from its own -h, so completion follows
// the commands as they change.
func runComplete(e *env, args []string) error {
	if len(args) == 0 {
		args = []string{""}
	}
	words, cur := args[:len(args)-1], args[len(args)-1]
	path := []string{}
	help := helpOf(e, path)
	for _, w := range words {
		if strings.HasPrefix(w, "-") {
			continue
		}
		if !strings.Contains(help, "Commands:") && !strings.Contains(help, "Subcommands:") {
			break
		}
		path = append(path, w)
		help = helpOf(e, path)
	}
	var candidates []string
	switch {
	case strings.HasPrefix(cur, "-"):
		for _, m := range flagName.FindAllStringSubmatch(help, -1) {
			if strings.HasPrefix(cur, "--") {
				m[1] = "-" + m[1]
			}
			candidates = append(candidates, m[1])
		}
	case strings.Contains(help, "Commands:") || strings.Contains(help, "Subcommands:"):
		for _, m := range listedName.FindAllStringSubmatch(help, -1) {
			candidates = append(candidates, m[1])
		}
	default:
		if m := usageLine.FindStringSubmatch(help); m != nil && strings.Contains(m[2], "ID") && len(path) > 0 {
			candidates = liveIDs(e, path[0])
		}
	}
	for _, c := range candidates {
		if strings.HasPrefix(c, cur) {
			fmt.Fprintln(e.stdout, c)
		}
	}
	return nil
}

// helpOf is the -h text of the command path names (the top usage for
// none).
func helpOf(e *env, path []string) string {
	var out bytes.Buffer
	sub := &env{stdin: e.stdin, stdout: &out, stderr: &out, getenv: e.getenv, signals: e.signals}
	run(sub, append(append([]string(nil), path...), "-h"))
	return out.String()
}

// liveIDs asks the cluster for the ids a command of group takes.
func liveIDs(e *env, group string) []string {
	list := map[string][]string{
		"task": {"task", "list", "-o", "name", "-stale"}, "explain": {"task", "list", "-o", "name", "-stale"},
		"node": {"node", "list", "-o", "name", "-stale"}, "job": {"job", "list", "-o", "name"},
	}[group]
	if list == nil {
		return nil
	}
	got := make(chan []string, 1)
	go func() {
		var out bytes.Buffer
		sub := &env{stdin: e.stdin, stdout: &out, stderr: &bytes.Buffer{}, getenv: e.getenv, signals: e.signals}
		if run(sub, list) != 0 {
			got <- nil
			return
		}
		got <- strings.Fields(out.String())
	}()
	select {
	case ids := <-got:
		return ids
	case <-time.After(2 * time.Second):
		return nil
	}
}

// helpTopics are what herd help explains besides the commands.
var helpTopics = map[string]string{
	"flags": `Flags stand before or after a command's arguments, written -flag or --flag,
with a value as -flag value or -flag=value; -- ends the flags. task submit
and task run read their command from their first argument on, so the
command keeps its own flags: herd task run -cpu 500 sh -c 'make test'.
`,
	"output": `Commands that print records take -o:
  json               the API's answer (-json is the same)
  yaml               the same in YAML
  name               the ids, one per line (herd task list -o name | xargs …)
  wide               the table with every column
  template=TEXT      the JSON answer's fields by their JSON names, and
                     {{range .list}}…{{end}} over a list ('.' each element):
                     -o 'template={{range .tasks}}{{.id}} {{.state}}\n{{end}}'
herd prints no colour; the updating progress line is drawn only on a
terminal.
`,
	"exit-codes": `0    success (for -wait and task run: the task SUCCEEDED)
1    a failure (the cluster refused, could not be reached, …)
2    a mistake in the command line: the message says which
N    with -wait and task run: the task's own exit code
130  interrupted
`,
}

func runHelp(e *env, args []string) error {
	if len(args) == 0 {
		printTopUsage(e.stdout, commands())
		fmt.Fprintln(e.stdout, "\nTopics (herd help TOPIC): exit-codes, flags, output")
		return nil
	}
	if text, ok := helpTopics[args[0]]; ok && len(args) == 1 {
		fmt.Fprint(e.stdout, text)
		return nil
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(e, append(append([]string(nil), args[1:]...), "-h"))
		}
	}
	return usagef("no help for %q: a command (herd help) or a topic (exit-codes, flags, output)", strings.Join(args, " "))
}
