package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"herd/api"

	"sigs.k8s.io/yaml"
)

// clientCommand is a command that talks to a cluster: its flag set, the
// client's flags among them.
type clientCommand struct {
	fs *flag.FlagSet
	cf clientFlags
}

// newClientCommand declares a command's flags and the client's (-json
// too where the command prints an answer); the command declares its own
// flags on fs before calling start.
func newClientCommand(e *env, name, argsUsage, summary string, withJSON bool) *clientCommand {
	c := &clientCommand{fs: newFlags(e, name, argsUsage, summary)}
	c.cf.register(e, c.fs, withJSON)
	return c
}

// start parses args, checks that exactly n arguments remain (wrong is
// the usage error when they do not) and returns the client they name.
func (c *clientCommand) start(e *env, args []string, n int, wrong string) (*api.Client, error) {
	if err := parse(e, c.fs, args); err != nil {
		return nil, err
	}
	if c.fs.NArg() != n {
		return nil, usagef("%s", wrong)
	}
	return c.cf.client()
}

// defaultAddress has no scheme: http, or https once -ca-file is given.
const defaultAddress = "127.0.0.1:4646"

// clientFlags are shared by every command that talks to a cluster.
type clientFlags struct {
	address                       string
	json                          bool
	output                        string
	watch                         bool
	token                         string
	caFile, clientCert, clientKey string
}

func (c *clientFlags) register(e *env, fs *flag.FlagSet, withJSON bool) {
	def := defaultAddress
	if v, ok := e.getenv("HERD_ADDR"); ok && v != "" {
		def = v
	}
	fs.StringVar(&c.address, "address", def, "comma-separated server HTTP addresses (HERD_ADDR)")
	envOr := func(name string) string { v, _ := e.getenv(name); return v }
	fs.StringVar(&c.token, "token", envOr("HERD_TOKEN"), "ACL token secret (HERD_TOKEN)")
	fs.StringVar(&c.caFile, "ca-file", envOr("HERD_CACERT"), "the cluster CA to trust: addresses without a scheme become https (HERD_CACERT)")
	fs.StringVar(&c.clientCert, "client-cert", envOr("HERD_CLIENT_CERT"), "this client's certificate, when the API asks for one (HERD_CLIENT_CERT)")
	fs.StringVar(&c.clientKey, "client-key", envOr("HERD_CLIENT_KEY"), "the client certificate's key (HERD_CLIENT_KEY)")
	if withJSON {
		fs.BoolVar(&c.json, "json", false, "print the raw JSON answer (-o json)")
		fs.StringVar(&c.output, "o", "", "output: json, yaml, name (the ids, one per line), wide (the table with every column),\nor template=TEMPLATE (the JSON answer's fields by their JSON names: '{{.id}} {{.state}}',\nand {{range .tasks}}…{{end}} over a list, '.' being each element; \\n and \\t are a newline and a tab)")
	}
}

// checkOutput refuses an -o the CLI does not know.
func (c *clientFlags) checkOutput() error {
	switch {
	case c.output == "", c.output == "json", c.output == "yaml", c.output == "name", c.output == "wide":
		return nil
	case strings.HasPrefix(c.output, "template="):
		if _, err := parseTemplate(strings.TrimPrefix(c.output, "template=")); err != nil {
			return usagef("-o %s: %v", c.output, err)
		}
		return nil
	}
	return usagef("-o %q: want json, yaml, name, wide or template=TEMPLATE", c.output)
}

// structured reports whether the answer is printed as data (-json, or an
// -o other than wide) rather than as the command's table.
func (c *clientFlags) structured() bool { return c.json || (c.output != "" && c.output != "wide") }

// wide reports whether the table is to show every column.
func (c *clientFlags) wide() bool { return c.output == "wide" }

// print prints an answer in the -o form asked (JSON by default).
func (c *clientFlags) print(w io.Writer, v any) error {
	switch {
	case c.output == "yaml":
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	case c.output == "name":
		return printNames(w, v)
	case strings.HasPrefix(c.output, "template="):
		return printTemplate(w, strings.TrimPrefix(c.output, "template="), v)
	}
	return printJSON(w, v)
}

// generic is v as its JSON form decodes: maps, slices and values, keyed
// by the JSON names.
func generic(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	err = json.Unmarshal(b, &out)
	return out, err
}

// printNames prints the id of a record, or of each record of a list
// (a JSON array, or an answer holding one array of records).
func printNames(w io.Writer, v any) error {
	g, err := generic(v)
	if err != nil {
		return err
	}
	name := func(rec any) (string, bool) {
		m, ok := rec.(map[string]any)
		if !ok {
			return "", false
		}
		for _, key := range []string{"id", "accessor_id", "name"} {
			if s, ok := m[key].(string); ok && s != "" {
				return s, true
			}
		}
		return "", false
	}
	records, isList := g.([]any)
	if m, ok := g.(map[string]any); ok {
		if n, ok := name(m); ok {
			_, err := fmt.Fprintln(w, n)
			return err
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if list, ok := m[k].([]any); ok {
				records, isList = list, true
				break
			}
		}
	}
	if !isList {
		return fmt.Errorf("-o name: this answer names no records")
	}
	for _, rec := range records {
		n, ok := name(rec)
		if !ok {
			return fmt.Errorf("-o name: a record of this answer has no id or name")
		}
		if _, err := fmt.Fprintln(w, n); err != nil {
			return err
		}
	}
	return nil
}

// printTemplate fills a template (see parseTemplate) from the answer's
// JSON form.
func printTemplate(w io.Writer, text string, v any) error {
	tmpl, err := parseTemplate(text)
	if err != nil {
		return usagef("-o template: %v", err)
	}
	g, err := generic(v)
	if err != nil {
		return err
	}
	var buf strings.Builder
	if err := tmpl.fill(&buf, g); err != nil {
		return fmt.Errorf("-o template: %w", err)
	}
	out := buf.String()
	if !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	_, err = io.WriteString(w, out)
	return err
}

func (c *clientFlags) client() (*api.Client, error) {
	if err := c.checkOutput(); err != nil {
		return nil, err
	}
	cl, err := api.NewClient(c.address)
	if err != nil {
		return nil, usagef("%v", err)
	}
	if c.token != "" {
		cl.SetToken(c.token)
	}
	if c.caFile != "" || c.clientCert != "" || c.clientKey != "" {
		tc, err := cliTLS(c.caFile, c.clientCert, c.clientKey)
		if err != nil {
			return nil, err
		}
		t := api.NewTransport()
		t.TLSClientConfig = tc
		cl.SetHTTPClient(&http.Client{Timeout: 60 * time.Second, Transport: t})
		if c.caFile != "" {
			cl.WithHTTPS()
		}
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

// cliTLS trusts the cluster CA (host names checked as usual) and presents
// the client's certificate when given.
func cliTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("read -ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-ca-file %s holds no PEM certificate", caFile)
		}
		tc.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, usagef("-client-cert and -client-key go together")
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// watchOr prints once with show, or with -watch prints again whenever an
// event of topic arrives (and every 10 s, for what changes without one),
// until interrupted: on a terminal the screen is redrawn, otherwise each
// printing after the first follows a line with the time.
func (c *clientFlags) watchOr(e *env, cl *api.Client, topic string, show func() error) error {
	if !c.watch {
		return show()
	}
	sigs, stop := e.signals()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wake := wakeOnEvents(ctx, cl, 0, []api.EventTopicFilter{{Topic: topic}}, nil)
	tty := isTerminal(e.stdout)
	for first := true; ; first = false {
		switch {
		case tty:
			fmt.Fprint(e.stdout, "\033[H\033[2J")
		case !first:
			fmt.Fprintf(e.stdout, "--- %s\n", time.Now().Format(time.TimeOnly))
		}
		if err := show(); err != nil {
			return err
		}
		select {
		case <-sigs:
			return nil
		case <-wake:
			// Let a burst of changes settle into one printing.
			select {
			case <-sigs:
				return nil
			case <-time.After(300 * time.Millisecond):
			}
		case <-time.After(10 * time.Second):
		}
	}
}
