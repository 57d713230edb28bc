package test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"herd/api"
	"herd/config"
	"herd/internal/pki"
	"herd/test/localcluster"
)

// security is a secured cluster's material: the CA directory (which also
// holds every certificate issued) and the management token the harness
// bootstrapped.
type security struct {
	dir   string
	pool  *x509.CertPool
	token string
}

// secureOption issues each replica a server certificate from the CA in
// dir and turns TLS and ACLs on.
func secureOption(t interface{ Fatal(...any) }, dir string) ClusterOption {
	return func(c *config.Server) {
		files, err := localcluster.IssueTo(dir, pki.Identity{Role: pki.RoleServer, ID: c.ID})
		if err != nil {
			t.Fatal(err)
		}
		c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile, c.ACL = files.CA, files.Cert, files.Key, true
	}
}

func newSecurity(t interface{ Fatal(...any) }, dir string) *security {
	if err := pki.CreateCA(dir, "", 0); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, pki.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(raw)
	return &security{dir: dir, pool: pool}
}

// bootstrap takes the cluster's management token, once it has a leader.
func (c *Cluster) bootstrapACL() {
	c.t.Helper()
	cl := c.AllClient()
	tok, err := cl.BootstrapACL(Ctx(c.t, 30*time.Second))
	if err != nil {
		c.t.Fatalf("ACL bootstrap: %v", err)
	}
	c.sec.token = tok.SecretID
}

// Secure prepares a client of this cluster: on a secured cluster its
// transport trusts the CA, its addresses are https and it carries the
// management token. tr may be nil (a transport of its own).
func (c *Cluster) Secure(cl *api.Client, tr *http.Transport, timeout time.Duration) {
	if c.sec == nil {
		if tr != nil {
			cl.SetHTTPClient(&http.Client{Transport: tr, Timeout: timeout})
		}
		return
	}
	if tr == nil {
		tr = api.NewTransport()
	}
	tr.TLSClientConfig = &tls.Config{RootCAs: c.sec.pool, MinVersion: tls.VersionTLS12}
	cl.SetHTTPClient(&http.Client{Transport: tr, Timeout: timeout})
	cl.WithHTTPS()
	cl.SetToken(c.sec.token)
}

// Secured reports whether the cluster runs with TLS and ACLs.
func (c *Cluster) Secured() bool { return c.sec != nil }

// agentFiles issues an agent certificate for node id.
func (c *Cluster) agentFiles(id string) pki.Files {
	c.t.Helper()
	files, err := localcluster.IssueTo(c.sec.dir, pki.Identity{Role: pki.RoleAgent, ID: id})
	if err != nil {
		c.t.Fatal(err)
	}
	return files
}

// submitLoad submits total tasks one after another with idempotency keys,
// retrying what may be retried (503s and broken connections), as a client
// riding through certificate rotations would.
type submitLoad struct {
	mu    sync.Mutex
	acked []string
	fatal error
	done  chan struct{}
}

func startSubmitLoad(ctx context.Context, cl *api.Client, prefix string, total int) *submitLoad {
	l := &submitLoad{done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for i := 0; i < total; i++ {
			key := fmt.Sprintf("%s-%d", prefix, i)
			for try := 0; ; try++ {
				res, _, err := cl.SubmitTask(ctx, api.TaskSpec{Command: []string{"true"}, IdempotencyKey: key})
				if err == nil {
					l.mu.Lock()
					l.acked = append(l.acked, res.ID)
					l.mu.Unlock()
					break
				}
				if code := statusOf(err); (code != 0 && code != 503) || try > 20 || ctx.Err() != nil {
					l.mu.Lock()
					l.fatal = fmt.Errorf("%s: %w", key, err)
					l.mu.Unlock()
					return
				}
			}
		}
	}()
	return l
}

// reached reports whether n submits were acknowledged, or the load failed.
func (l *submitLoad) reached(n int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked) >= n || l.fatal != nil
}

// wait waits for the load to end and returns what was acknowledged, or
// the error that stopped it.
func (l *submitLoad) wait() ([]string, error) {
	<-l.done
	return l.acked, l.fatal
}
