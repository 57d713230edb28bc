// Command herd is the single binary of herd: scheduler replicas (server),
// a local development cluster (dev), and the operator CLI.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"syscall"

	"herd/internal/version"
)

// env is how commands read the environment (tests replace it).
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) (string, bool)
	// signals delivers interrupts to long-running commands.
	signals func() (<-chan os.Signal, func())
}

type command struct {
	name    string
	summary string
	run     func(e *env, args []string) error
}

// usageError marks a mistake in how the command was called: exit code 2.
type usageError struct{ msg string }

func (u *usageError) Error() string { return u.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

func commands() []command {
	return []command{
		{"server", "run a scheduler replica", runServer},
		{"agent", "run an edge agent that executes attempts", runAgent},
		{"dev", "run a local cluster (3 replicas, 2 agents) in one process", runDev},
		{"task", "submit, inspect and list tasks", runTask},
		{"job", "run pipelines: DAGs of stages that pass outputs to each other", runJob},
		{"node", "list, inspect, drain and register worker nodes", runNode},
		{"image", "put container images into nodes' caches: pull from a registry, import an archive", runImage},
		{"monitor", "print the cluster's events as they happen (tasks, nodes, jobs)", runMonitor},
		{"explain", "say why a task waits, node by node (or what-if for a spec)", runExplain},
		{"operator", "inspect and manage raft and snapshots", runOperator},
		{"tls", "create the cluster CA and certificates", runTLS},
		{"acl", "bootstrap ACLs and manage tokens", runACL},
		{"lease", "check, from inside a task, that its attempt is still current", runLease},
		{"bench", "measure throughput, latency, footprint and failover on this machine", runBench},
		{"sim", "score the cluster's judgements of nodes and tasks on a simulated fleet", runSim},
		{"version", "print the version, commit, build date and Go version", runVersion},
		{"completion", "print the shell completion script (bash, zsh, fish)", runCompletion},
		{"help", "explain a command or a topic: herd help task submit, herd help output", runHelp},
	}
}

func main() {
	e := &env{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.LookupEnv,
		signals: func() (<-chan os.Signal, func()) {
			ch := make(chan os.Signal, 2)
			signal.Notify(ch, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
			return ch, func() { signal.Stop(ch) }
		},
	}
	stopProfile := startCPUProfile()
	code := run(e, os.Args[1:])
	stopProfile()
	os.Exit(code)
}

// startCPUProfile writes a CPU profile of this process, from now until it
// exits through main or is sent SIGUSR1 (where there is one), to the file
// HERD_CPU_PROFILE names (when set): how the servers and agents of a real
// deployment are profiled (herd bench -process-profiles sets it for the
// processes it starts, and signals them when its measured window ends).
// stop may be called more than once.
func startCPUProfile() (stop func()) {
	path := os.Getenv("HERD_CPU_PROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "herd: HERD_CPU_PROFILE:", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "herd: HERD_CPU_PROFILE:", err)
		f.Close()
		return func() {}
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}
	stopOnProfileSignal(stop)
	return stop
}

func run(e *env, args []string) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		printTopUsage(e.stdout, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == completeCommand {
		// Not listed: the completion scripts call it.
		return exitCode(e, runComplete(e, args[1:]))
	}
	if args[0] == agentGuardCommand {
		// Not listed: the agent starts it, nobody else.
		return exitCode(e, runAgentGuard(e, args[1:]))
	}
	for _, c := range cmds {
		if c.name == args[0] {
			err := c.run(e, args[1:])
			return exitCode(e, err)
		}
	}
	fmt.Fprintf(e.stderr, "herd: unknown command %q\n\n", args[0])
	printTopUsage(e.stderr, cmds)
	return 2
}

func exitCode(e *env, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var x *exitWith
	if errors.As(err, &x) {
		fmt.Fprintln(e.stderr, "herd:", x.msg)
		return x.code
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(e.stderr, "herd:", ue.msg)
		return 2
	}
	if errors.Is(err, context.Canceled) {
		return 130
	}
	fmt.Fprintln(e.stderr, "herd: error:", err)
	if next := nextStep(err); next != "" {
		fmt.Fprintln(e.stderr, "herd: next:", next)
	}
	return 1
}

func printTopUsage(w io.Writer, cmds []command) {
	fmt.Fprintln(w, "Usage: herd <command> [flags] [args]")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'herd <command> -h' for a command's flags.")
}

// subcommands dispatches a command group such as "task" or "operator raft".
func subcommands(e *env, group string, args []string, subs []command) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		w := e.stdout
		if len(args) == 0 {
			w = e.stderr
		}
		fmt.Fprintf(w, "Usage: herd %s <subcommand> [flags] [args]\n\nSubcommands:\n", group)
		for _, c := range subs {
			fmt.Fprintf(w, "  %-20s %s\n", c.name, c.summary)
		}
		if len(args) == 0 {
			return usagef("%s needs a subcommand", group)
		}
		return nil
	}
	for _, c := range subs {
		if c.name == args[0] {
			return c.run(e, args[1:])
		}
	}
	names := make([]string, len(subs))
	for i, c := range subs {
		names[i] = c.name
	}
	sort.Strings(names)
	return usagef("unknown %s subcommand %q (one of: %s)", group, args[0], strings.Join(names, ", "))
}

// newFlags makes a flag set whose errors are returned, not printed-and-exit.
func newFlags(e *env, name, argsUsage, summary string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: herd %s [flags] %s\n\n%s\n\nFlags:\n", name, argsUsage, summary)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags before and after the arguments, as "--flag" or
// "-flag", with "--" ending the flags; -h prints usage to stdout and ends
// the command. A command whose arguments are a command line (task submit)
// stops at its first argument, as docker run does, so that the command's
// own flags stay its own.
func parse(e *env, fs *flag.FlagSet, args []string) error {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(e.stdout)
			fs.Usage()
			return flag.ErrHelp
		}
	}
	fs.SetOutput(io.Discard)
	flags, positional := splitArgs(fs, args, commandLineCommands[fs.Name()])
	if err := fs.Parse(append(append(flags, "--"), positional...)); err != nil {
		return usagef("%s: %v (see 'herd %s -h')", fs.Name(), err, fs.Name())
	}
	return nil
}

// commandLineCommands take a command line as their arguments.
var commandLineCommands = map[string]bool{"task submit": true, "task run": true}

// splitArgs separates flags (with their values) from arguments wherever
// they stand. A flag's value is the next argument unless the flag is a
// boolean or written -flag=value; "-" alone is an argument (standard
// input); after "--", or after the first argument when stopAtArg, all is
// arguments.
func splitArgs(fs *flag.FlagSet, args []string, stopAtArg bool) (flags, positional []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return flags, append(positional, args[i+1:]...)
		case len(a) < 2 || a[0] != '-':
			if stopAtArg {
				return flags, append(positional, args[i:]...)
			}
			positional = append(positional, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil && !isBoolFlag(f) && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return flags, positional
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func runVersion(e *env, args []string) error {
	fs := newFlags(e, "version", "", "Print this build's version, the commit and time it was built from, and the Go release that built it.")
	asJSON := fs.Bool("json", false, "print it as JSON")
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("version takes no arguments")
	}
	info := version.Get()
	if *asJSON {
		return printJSON(e.stdout, info)
	}
	fmt.Fprintln(e.stdout, info.String())
	return nil
}
