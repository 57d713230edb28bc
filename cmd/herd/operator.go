package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"herd/api"
)

func runOperator(e *env, args []string) error {
	return subcommands(e, "operator", args, []command{
		{"raft", "list-peers, remove-peer, transfer-leadership", runOperatorRaft},
		{"snapshot", "save or restore the cluster state", runOperatorSnapshot},
		{"scheduler", "the leader's scheduling counters and pending queue", runOperatorScheduler},
		{"audit", "who did what: operator actions and refused agent requests", runOperatorAudit},
		{"gossip", "the gossip keyring: list, install, use, remove; keygen", runOperatorGossip},
		{"debug", "check-state: check every replica's state for broken invariants", runOperatorDebug},
	})
}

func runOperatorDebug(e *env, args []string) error {
	return subcommands(e, "operator debug", args, []command{
		{"check-state", "check every replica's applied state for broken invariants", runCheckState},
	})
}

// runCheckState asks every server in the raft configuration to check its
// own applied state, and exits 1 when one reports a broken invariant or
// cannot be asked: each replica holds its own copy, and a bug may break
// one of them only.
func runCheckState(e *env, args []string) error {
	c := newClientCommand(e, "operator debug check-state", "", "Check the invariants of every replica's applied state: each node's reservations and\nrunning attempts equal the sum over its live attempts, every live attempt is its task's\ncurrent one, no pending or finished task holds an attempt, nothing is negative, the\nindexes hold exactly the records. Reports and never repairs; exits 1 on a violation.", true)
	cf := &c.cf
	cl, err := c.start(e, args, 0, "check-state takes no arguments")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conf, err := cl.RaftConfiguration(ctx)
	if err != nil {
		return fmt.Errorf("check state: list the servers: %w", err)
	}
	type answer struct {
		api.StateCheck
		Error string `json:"error,omitempty"`
	}
	var answers []answer
	bad := 0
	for _, srv := range conf.Servers {
		one := cf
		one.address = srv.HTTPAddress
		var a answer
		var err error
		if srv.HTTPAddress == "" {
			err = errors.New("no HTTP address recorded yet (a server that just started records it within seconds)")
		} else {
			var c *api.Client
			if c, err = one.client(); err == nil {
				c.Retries = 2
				a.StateCheck, err = c.CheckState(ctx)
			}
		}
		if err != nil {
			a.Server, a.Error = srv.ID, err.Error()
		}
		if a.Error != "" || !a.OK {
			bad++
		}
		answers = append(answers, a)
	}
	if cf.structured() {
		if err := cf.print(e.stdout, answers); err != nil {
			return err
		}
	} else {
		tb := &table{}
		tb.add("SERVER", "INDEX", "TASKS", "ATTEMPTS", "NODES", "TOOK", "RESULT")
		for _, a := range answers {
			result := "ok"
			switch {
			case a.Error != "":
				result = "not asked: " + a.Error
			case !a.OK:
				result = fmt.Sprintf("%d violations", len(a.Violations))
			}
			tb.add(a.Server, strconv.FormatUint(a.Index, 10), strconv.Itoa(a.Tasks), strconv.Itoa(a.Attempts), strconv.Itoa(a.Nodes),
				(time.Duration(a.TookMillis) * time.Millisecond).String(), result)
		}
		tb.write(e.stdout)
		for _, a := range answers {
			for _, v := range a.Violations {
				fmt.Fprintf(e.stdout, "%s: %s\n", a.Server, v)
			}
		}
	}
	if bad > 0 {
		return &exitWith{code: 1, msg: fmt.Sprintf("%d of %d servers could not be checked or hold a broken state", bad, len(answers))}
	}
	return nil
}

func runOperatorScheduler(e *env, args []string) error {
	c := newClientCommand(e, "operator scheduler", "", "Show the leader's scheduling loop: passes, the waiting tasks they looked at,\nplacements committed and the Raft entries that carried them, placements refused\nat apply time by reason, and the pending queue as of the last pass.", true)
	cf := &c.cf
	cl, err := c.start(e, args, 0, "scheduler takes no arguments")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := cl.SchedulerStatus(ctx)
	if err != nil {
		return fmt.Errorf("scheduler status: %w", err)
	}
	if cf.structured() {
		return cf.print(e.stdout, st)
	}
	rejections := "none"
	if len(st.Rejections) > 0 {
		var parts []string
		for _, code := range slices.Sorted(maps.Keys(st.Rejections)) {
			parts = append(parts, fmt.Sprintf("%s %d", code, st.Rejections[code]))
		}
		rejections = strings.Join(parts, ", ")
	}
	tb := &table{}
	tb.add("leader", st.ID)
	tb.add("queue depth", strconv.FormatInt(st.QueueDepth, 10))
	tb.add("oldest wait", (time.Duration(st.OldestWaitMs) * time.Millisecond).String())
	tb.add("passes", strconv.FormatUint(st.Passes, 10))
	tb.add("tasks looked at", strconv.FormatUint(st.Scanned, 10))
	tb.add("placements", strconv.FormatUint(st.Placements, 10))
	tb.add("raft entries", strconv.FormatUint(st.Entries, 10))
	tb.add("refused at apply", rejections)
	tb.write(e.stdout)
	return nil
}

func runOperatorRaft(e *env, args []string) error {
	return subcommands(e, "operator raft", args, []command{
		{"list-peers", "show the raft configuration", runListPeers},
		{"remove-peer", "remove a server from the raft configuration: remove-peer ID", runRemovePeer},
		{"transfer-leadership", "hand leadership to another server", runTransferLeadership},
	})
}

func runListPeers(e *env, args []string) error {
	c := newClientCommand(e, "operator raft list-peers", "", "Show the raft configuration: every server, its addresses, vote and leadership.", true)
	cf := &c.cf
	cl, err := c.start(e, args, 0, "list-peers takes no arguments")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conf, err := cl.RaftConfiguration(ctx)
	if err != nil {
		return fmt.Errorf("list peers: %w", err)
	}
	if cf.structured() {
		return cf.print(e.stdout, conf)
	}
	tb := &table{}
	tb.add("ID", "RAFT ADDRESS", "HTTP ADDRESS", "VOTER", "LEADER", "VERSION", "COMMAND FORMS")
	for _, s := range conf.Servers {
		tb.add(s.ID, s.RaftAddress, s.HTTPAddress, strconv.FormatBool(s.Voter), strconv.FormatBool(s.Leader), orDash(s.Version), strconv.Itoa(s.CommandForms))
	}
	tb.write(e.stdout)
	return nil
}

func runRemovePeer(e *env, args []string) error {
	c := newClientCommand(e, "operator raft remove-peer", "ID", "Remove a server from the raft configuration (for a server that is gone for good).\nThe leader refuses a removal that would leave fewer answering voters than a quorum,\nunless -force.", false)
	fs := c.fs
	force := fs.Bool("force", false, "remove it even if the voters left that answer are not a quorum (they must come back)")
	cl, err := c.start(e, args, 1, "remove-peer takes exactly one server id")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.RemovePeer(ctx, fs.Arg(0), *force); err != nil {
		return fmt.Errorf("remove peer: %w", err)
	}
	fmt.Fprintf(e.stdout, "Removed %s from the raft configuration\n", fs.Arg(0))
	return nil
}

func runTransferLeadership(e *env, args []string) error {
	c := newClientCommand(e, "operator raft transfer-leadership", "", "Ask the leader to hand leadership to another voter.", false)
	fs := c.fs
	target := fs.String("id", "", "the server to hand leadership to (default: the most up-to-date voter)")
	cl, err := c.start(e, args, 0, "transfer-leadership takes no arguments")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := cl.TransferLeadership(ctx, *target)
	if err != nil {
		return fmt.Errorf("transfer leadership: %w", err)
	}
	fmt.Fprintf(e.stdout, "Leadership transferred; the leader is now %s (%s)\n", l.ID, l.HTTPAddress)
	return nil
}

func runOperatorSnapshot(e *env, args []string) error {
	return subcommands(e, "operator snapshot", args, []command{
		{"save", "save a snapshot of the cluster state to FILE", runSnapshotSave},
		{"restore", "replace the cluster state with the snapshot in FILE", runSnapshotRestore},
	})
}

func runSnapshotSave(e *env, args []string) error {
	c := newClientCommand(e, "operator snapshot save", "FILE", "Save a consistent snapshot of the whole cluster state, taken by the leader.", false)
	fs := c.fs
	cl, err := c.start(e, args, 1, "snapshot save takes exactly one file name")
	if err != nil {
		return err
	}
	path := fs.Arg(0)
	// Write to a temp file and rename, so a failed save never leaves a
	// half-written file under the requested name.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".herd-snapshot-*")
	if err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	defer os.Remove(tmp.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := cl.SnapshotSave(ctx, tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("snapshot save: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("snapshot save: %w", err)
	}
	st, _ := tmp.Stat()
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	fmt.Fprintf(e.stdout, "Saved snapshot to %s (%d bytes)\n", path, st.Size())
	return nil
}

func runSnapshotRestore(e *env, args []string) error {
	fs := newFlags(e, "operator snapshot restore", "FILE", "Replace the whole cluster state with a saved snapshot. The raft membership is kept.")
	var cf clientFlags
	cf.register(e, fs, false)
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("snapshot restore takes exactly one file name")
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("snapshot restore: %w", err)
	}
	defer f.Close()
	cl, err := cf.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := cl.SnapshotRestore(ctx, f); err != nil {
		return fmt.Errorf("snapshot restore: %w", err)
	}
	fmt.Fprintf(e.stdout, "Restored snapshot from %s\n", fs.Arg(0))
	return nil
}
