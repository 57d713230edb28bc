package agent

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"herd/api"
	"herd/internal/pki"
)

// HeaderSHA256 carries a served dataset's SHA-256 (hex): the fetching
// agent checks what it received against it.
const HeaderSHA256 = "X-Herd-Sha256"

// serveDatasets serves the agent's data port and returns the address it
// listens on. What each route serves, and to whom when the cluster runs
// TLS (each request is judged by the certificate it came with; a cluster
// without TLS runs on loopback or was told -insecure):
//
//	GET /v1/datasets/{name}  the outputs this node keeps, with their
//	                         SHA-256: servers and every agent (a stage
//	                         placed elsewhere fetches its inputs here)
//	GET /v1/logs/{attempt}   an attempt's log: servers, and this node's
//	GET /v1/images           the image cache: servers, and this node's
//	                         own agent certificate (tools on the node)
//	POST /v1/images/pull     pull a registry reference into the cache,
//	POST /v1/images/import   store an uploaded archive's images: the
//	                         same (a replica proxies them for operators
//	                         the servers' API has already authorised)
//	GET /metrics             the agent's metrics: servers, this node's
//	                         certificate, and client certificates (a
//	                         Prometheus with `herd tls cert create -client`)
//
// Another node's agent certificate gets 403 for logs, images and metrics:
// one broken edge box must not read every other box's task output.
func (a *Agent) serveDatasets(ctx context.Context) (string, error) {
	addr := a.cfg.DataAddr
	if addr == "" {
		host := "127.0.0.1"
		if len(a.cfg.Servers) > 0 {
			server := a.cfg.Servers[0]
			if u, err := url.Parse(server); err == nil && u.Host != "" {
				server = u.Host
			}
			if conn, err := net.Dial("udp", server); err == nil {
				host = conn.LocalAddr().(*net.UDPAddr).IP.String()
				conn.Close()
			}
		}
		addr = net.JoinHostPort(host, "0")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("dataset listener %s: %w", addr, err)
	}
	if a.tls != nil {
		ln = tls.NewListener(ln, a.tls.ServerConfig(pki.ClientCertRequired, func(id pki.Identity) error {
			if !id.Role.Valid() {
				return fmt.Errorf("the data port serves the cluster's servers, agents and clients only, not %s", id)
			}
			return nil
		}))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/datasets/{name}", a.dataRoute(anyAgent, a.handleDataset))
	mux.Handle("GET /metrics", a.dataRoute(scrapers, a.metricsHandler().ServeHTTP))
	mux.HandleFunc("GET /v1/logs/{attempt}", a.dataRoute(serversAndSelf, a.handleLog))
	mux.HandleFunc("GET /v1/images", a.dataRoute(serversAndSelf, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a.imageStatus())
	}))
	mux.HandleFunc("POST /v1/images/pull", a.dataRoute(serversAndSelf, a.handleImagePull))
	mux.HandleFunc("POST /v1/images/import", a.dataRoute(serversAndSelf, a.handleImageImport))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), nil
}

// Who may use a route of the data port, by certificate (see serveDatasets).
type dataAudience int

const (
	anyAgent       dataAudience = iota // servers and every agent
	serversAndSelf                     // servers and this node's own certificate
	scrapers                           // serversAndSelf and client certificates
)

// dataRoute serves h to the audience: without TLS to everyone, with it to
// the certificates the audience admits; others get 403 saying who may.
func (a *Agent) dataRoute(who dataAudience, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a.tls == nil {
			h(w, r)
			return
		}
		var id pki.Identity
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			id, _ = pki.IdentityOf(r.TLS.PeerCertificates[0])
		}
		self := id == pki.Identity{Role: pki.RoleAgent, ID: a.cfg.ID}
		ok := id.Role == pki.RoleServer || self
		switch who {
		case anyAgent:
			ok = ok || id.Role == pki.RoleAgent
		case scrapers:
			ok = ok || id.Role == pki.RoleClient
		}
		if !ok {
			msg := map[dataAudience]string{
				anyAgent:       "datasets are served to the cluster's servers and agents",
				serversAndSelf: "served to the cluster's servers and to node " + a.cfg.ID + "'s own certificate only",
				scrapers:       "metrics are served to the cluster's servers, node " + a.cfg.ID + "'s own certificate and client certificates",
			}[who]
			writeDataError(w, http.StatusForbidden, fmt.Sprintf("%s may not %s %s: %s", id, r.Method, r.URL.Path, msg))
			return
		}
		h(w, r)
	}
}

// writeDataError answers with a JSON error body, as the servers' API does.
func writeDataError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func (a *Agent) handleDataset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	path, ok := a.profile.localPath(name)
	if !ok {
		http.Error(w, fmt.Sprintf("dataset %q is not held on node %s", name, a.cfg.ID), http.StatusNotFound)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		http.Error(w, fmt.Sprintf("dataset %q is not a file", name), http.StatusConflict)
		return
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set(HeaderSHA256, hex.EncodeToString(h.Sum(nil)))
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", info.ModTime(), f)
}

// prepareInputs puts a stage's inputs where its command finds them,
// under a directory of the attempt's (HERD_INPUTS): linked from this
// node's outputs, or fetched from the node that holds each, checked
// against the SHA-256 it sends. It returns the directory, or why an
// input could not be had (the attempt then fails, and is retried like
// any failure).
func (a *Agent) prepareInputs(ctx context.Context, as api.Assignment) (string, error) {
	spec := as.Spec
	if len(spec.Inputs) == 0 || len(spec.InputPaths) != len(spec.Inputs) {
		return "", nil
	}
	dir := filepath.Join(a.cfg.DataDir, "inputs", as.Attempt.ID)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("inputs directory: %w", err)
	}
	for i, name := range spec.Inputs {
		rel := filepath.Clean(spec.InputPaths[i])
		if filepath.IsAbs(rel) || strings.HasPrefix(rel, "..") {
			return dir, fmt.Errorf("input %s: path %q leaves the inputs directory", name, spec.InputPaths[i])
		}
		dst := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
			return dir, fmt.Errorf("input %s: %w", name, err)
		}
		if src, ok := a.profile.localPath(name); ok {
			if err := os.Link(src, dst); err == nil {
				continue
			}
			if err := copyFile(src, dst); err != nil {
				return dir, fmt.Errorf("input %s: copy from this node's outputs: %w", name, err)
			}
			continue
		}
		var from *api.InputSource
		for j := range as.Inputs {
			if as.Inputs[j].Dataset == name {
				from = &as.Inputs[j]
				break
			}
		}
		if from == nil {
			return dir, &inputUnavailableError{fmt.Errorf("input %s is held on no reachable node", name)}
		}
		if err := a.fetchInput(ctx, *from, dst); err != nil {
			return dir, fmt.Errorf("input %s from node %s: %w", name, from.NodeID, err)
		}
	}
	return dir, nil
}

// inputUnavailableError is an input that no live node served: its
// holder is unreachable, does not have it, or dropped the download. It
// is neither the task's fault nor this node's.
type inputUnavailableError struct{ err error }

func (e *inputUnavailableError) Error() string { return e.err.Error() }
func (e *inputUnavailableError) Unwrap() error { return e.err }

// fetchInput downloads a dataset from the agent holding it into dst,
// through a temporary file renamed once its SHA-256 matches. What the
// holder does wrong or cannot do is an inputUnavailableError; a checksum
// that does not match is not (the holder answers, wrongly, every time).
func (a *Agent) fetchInput(ctx context.Context, from api.InputSource, dst string) error {
	scheme := "http"
	client := &http.Client{Timeout: 10 * time.Minute}
	if a.tls != nil {
		scheme = "https"
		tr := &http.Transport{DialTLSContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return pki.Dial(ctx, (&net.Dialer{Timeout: 30 * time.Second}).DialContext, addr, a.tls.ClientConfig(pki.RoleAgent))
		}}
		defer tr.CloseIdleConnections()
		client.Transport = tr
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+from.Address+"/v1/datasets/"+url.PathEscape(from.Dataset), nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return &inputUnavailableError{err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return &inputUnavailableError{fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg)))}
	}
	want := resp.Header.Get(HeaderSHA256)
	if want == "" {
		return errors.New("the holder sent no checksum")
	}
	tmp := dst + ".part"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), resp.Body)
	cerr := f.Close()
	switch {
	case err != nil && !isNoSpace(err):
		os.Remove(tmp)
		return &inputUnavailableError{fmt.Errorf("download: %w", err)}
	case err != nil || cerr != nil:
		os.Remove(tmp)
		return fmt.Errorf("download: %w", errors.Join(err, cerr))
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		os.Remove(tmp)
		return fmt.Errorf("checksum mismatch: got sha256 %s, the holder says %s", got, want)
	}
	return os.Rename(tmp, dst)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
