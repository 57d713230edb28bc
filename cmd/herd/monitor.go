package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mattn/go-isatty"

	"herd/api"
)

func runMonitor(e *env, args []string) error {
	fs := newFlags(e, "monitor", "", "Print the cluster's event stream: task timeline, node and job events, in\nthe order the cluster applied them, as they happen. It resumes on another\nserver without losing or repeating an event when one goes away. Each line\nshows the event's position (index.offset); -index and -offset start there.")
	var cf clientFlags
	cf.register(e, fs, true)
	index := fs.Uint64("index", 0, "start at this Raft index (default: the oldest event the server keeps)")
	offset := fs.Uint("offset", 0, "start at this event of -index")
	topics := fs.String("topic", "", "only these topics: task, node, job, each optionally :ID (comma-separated)")
	noFollow := fs.Bool("no-follow", false, "print what the server holds and exit, instead of following")
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("monitor takes no arguments")
	}
	filters, err := api.ParseEventTopics(*topics)
	if err != nil {
		return usagef("-topic: %v", err)
	}
	cl, err := cf.client()
	if err != nil {
		return err
	}
	cl.OnFailover = func(from, to string, err error) {
		fmt.Fprintf(e.stderr, "herd: %v; resuming from %s\n", err, to)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if e.signals != nil {
		sigs, stop := e.signals()
		defer stop()
		go func() {
			select {
			case <-sigs:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	q := api.EventQuery{From: api.EventPosition{Index: *index, Offset: uint32(*offset)}, Topics: filters}
	enc := json.NewEncoder(e.stdout)
	err = cl.Events(ctx, q, !*noFollow, func(l api.EventLine) error {
		if cf.structured() {
			if l.Lost != nil {
				return enc.Encode(api.EventLost{Lost: *l.Lost, Message: l.Message})
			}
			return enc.Encode(l.Event)
		}
		if l.Lost != nil {
			_, err := fmt.Fprintf(e.stdout, "-- %s\n", l.Message)
			return err
		}
		_, err := fmt.Fprintln(e.stdout, formatEvent(l.Event))
		return err
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("monitor: %w", err)
	}
	return nil
}

// formatEvent is one event on one line: when, where in the stream, what.
func formatEvent(ev api.Event) string {
	state := ""
	if ev.State != "" {
		state = " [" + ev.State + "]"
	}
	return fmt.Sprintf("%s %d.%d %-4s %s %s%s: %s", ev.Time.Local().Format("15:04:05.000"), ev.Index, ev.Offset,
		ev.Topic, ev.Key, ev.Kind, state, ev.Message)
}

// isTerminal reports whether w is a terminal, where progress is drawn on
// one updating line rather than as a line per change.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// statusLine prints progress: on a terminal it rewrites one line, else it
// prints a line per change.
type statusLine struct {
	w    io.Writer
	tty  bool
	last string
}

func newStatusLine(w io.Writer) *statusLine { return &statusLine{w: w, tty: isTerminal(w)} }

func (s *statusLine) show(line string) {
	if line == s.last {
		return
	}
	s.last = line
	if s.tty {
		fmt.Fprintf(s.w, "\r\033[K%s", line)
		return
	}
	fmt.Fprintf(s.w, "%s %s\n", time.Now().Format(time.TimeOnly), line)
}

// done ends the updating line.
func (s *statusLine) done() {
	if s.tty && s.last != "" {
		fmt.Fprintln(s.w)
	}
}

// bar draws n of total as a bar of width cells.
func bar(n, total, width int) string {
	if total <= 0 {
		return strings.Repeat(" ", width)
	}
	full := n * width / total
	return strings.Repeat("#", full) + strings.Repeat(".", width-full)
}

// wakeOnEvents follows the event stream of topics from index from and sends
// on the returned channel (without blocking) whenever events arrive; it
// stops with ctx.
func wakeOnEvents(ctx context.Context, cl *api.Client, from uint64, topics []api.EventTopicFilter, fn func(api.EventLine)) <-chan struct{} {
	wake := make(chan struct{}, 1)
	go func() {
		_ = cl.Events(ctx, api.EventQuery{From: api.EventPosition{Index: from}, Topics: topics}, true, func(l api.EventLine) error {
			if fn != nil {
				fn(l)
			}
			select {
			case wake <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	return wake
}
