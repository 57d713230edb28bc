package main

import (
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
	"strings"
	"time"

	"herd/api"
)

// defaultAddress has no scheme: http, or https once -ca-file is given.
const defaultAddress = "127.0.0.1:4646"

// clientFlags are shared by every command that talks to a cluster.
type clientFlags struct {
	address                       string
	json                          bool
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
		fs.BoolVar(&c.json, "json", false, "print the raw JSON answer")
	}
}

func (c *clientFlags) client() (*api.Client, error) {
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
