package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"herd/api"
)

const defaultAddress = "http://127.0.0.1:4646"

// clientFlags are shared by every command that talks to a cluster.
type clientFlags struct {
	address string
	json    bool
}

func (c *clientFlags) register(e *env, fs *flag.FlagSet, withJSON bool) {
	def := defaultAddress
	if v, ok := e.getenv("HERD_ADDR"); ok && v != "" {
		def = v
	}
	fs.StringVar(&c.address, "address", def, "comma-separated server HTTP addresses (HERD_ADDR)")
	if withJSON {
		fs.BoolVar(&c.json, "json", false, "print the raw JSON answer")
	}
}

func (c *clientFlags) client() (*api.Client, error) {
	cl, err := api.NewClient(c.address)
	if err != nil {
		return nil, usagef("%v", err)
	}
	// Ride out a leader election rather than failing at once.
	cl.Retries = 10
	cl.RetryWait = 500 * time.Millisecond
	return cl, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// kvFlag collects repeated key=value flags.
type kvFlag map[string]string

func (k kvFlag) String() string {
	parts := make([]string, 0, len(k))
	for key, v := range k {
		parts = append(parts, key+"="+v)
	}
	return strings.Join(parts, ",")
}

func (k kvFlag) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		key, v, ok := strings.Cut(p, "=")
		if !ok || key == "" {
			return fmt.Errorf("%q is not key=value", p)
		}
		k[key] = v
	}
	return nil
}

func randomKey() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "cli-" + hex.EncodeToString(b[:])
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// table writes aligned columns.
type table struct {
	rows [][]string
}

func (t *table) add(cols ...string) { t.rows = append(t.rows, cols) }

func (t *table) write(w io.Writer) {
	if len(t.rows) == 0 {
		return
	}
	widths := make([]int, len(t.rows[0]))
	for _, r := range t.rows {
		for i, c := range r {
			if i < len(widths) && len(c) > widths[i] {
				widths[i] = len(c)
			}
		}
	}
	for _, r := range t.rows {
		var b strings.Builder
		for i, c := range r {
			if i == len(r)-1 {
				b.WriteString(c)
				break
			}
			fmt.Fprintf(&b, "%-*s  ", widths[i], c)
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}
