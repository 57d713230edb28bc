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

// serveDatasets serves the outputs this node keeps to other agents that
// need them as inputs: GET /v1/datasets/{name} with the file's SHA-256;
// the agent's metrics, GET /metrics; and its attempts' logs,
// GET /v1/logs/{attempt}.
// With TLS only agents and servers of the cluster are served. It returns
// the address it listens on.
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
			if id.Role != pki.RoleAgent && id.Role != pki.RoleServer {
				return fmt.Errorf("datasets are served to the cluster's agents and servers only, not to %s", id)
			}
			return nil
		}))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/datasets/{name}", a.handleDataset)
	mux.Handle("GET /metrics", a.metricsHandler())
	mux.HandleFunc("GET /v1/logs/{attempt}", a.handleLog)
	mux.HandleFunc("GET /v1/images", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a.imageStatus())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), nil
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
			return dir, fmt.Errorf("input %s is held on no reachable node", name)
		}
		if err := a.fetchInput(ctx, *from, dst); err != nil {
			return dir, fmt.Errorf("input %s from node %s: %w", name, from.NodeID, err)
		}
	}
	return dir, nil
}

// fetchInput downloads a dataset from the agent holding it into dst,
// through a temporary file renamed once its SHA-256 matches.
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
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg)))
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
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("download: %w", err)
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
