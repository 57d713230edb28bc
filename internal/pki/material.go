package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// Files names a holder's TLS material on disk.
type Files struct {
	CA, Cert, Key string
}

// Enabled reports whether any file is named; Check says whether the set
// is whole.
func (f Files) Enabled() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Check says what is missing from a partial set.
func (f Files) Check() error {
	if !f.Enabled() {
		return nil
	}
	var missing []string
	if f.CA == "" {
		missing = append(missing, "-tls-ca-file")
	}
	if f.Cert == "" {
		missing = append(missing, "-tls-cert-file")
	}
	if f.Key == "" {
		missing = append(missing, "-tls-key-file")
	}
	if len(missing) > 0 {
		return fmt.Errorf("TLS needs a CA, a certificate and its key: %v not given", missing)
	}
	return nil
}

// Material is a holder's CA pool, certificate and identity, read from
// Files and swapped whole by Reload: connections made after a reload use
// the new material, established ones keep theirs. It is safe for
// concurrent use.
type Material struct {
	files Files
	cur   atomic.Pointer[loaded]
}

type loaded struct {
	pool     *x509.CertPool
	cert     tls.Certificate
	identity Identity
	notAfter time.Time
}

// Load reads the files; the certificate must be signed by the CA and
// carry a herd identity.
func Load(f Files) (*Material, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	if !f.Enabled() {
		return nil, errors.New("no TLS files given")
	}
	m := &Material{files: f}
	if err := m.Reload(); err != nil {
		return nil, err
	}
	return m, nil
}

// Reload reads the files again. On any error the material in use stays.
func (m *Material) Reload() error {
	caPEM, err := os.ReadFile(m.files.CA)
	if err != nil {
		return fmt.Errorf("read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("%s holds no PEM certificate", m.files.CA)
	}
	cert, err := tls.LoadX509KeyPair(m.files.Cert, m.files.Key)
	if err != nil {
		return fmt.Errorf("load certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return fmt.Errorf("parse certificate: %w", err)
	}
	cert.Leaf = leaf
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("%s is not signed by the CA in %s: %w", m.files.Cert, m.files.CA, err)
	}
	id, err := IdentityOf(leaf)
	if err != nil {
		return err
	}
	if cur := m.cur.Load(); cur != nil && cur.identity != id {
		return fmt.Errorf("the new certificate names %s, not %s: a reload cannot change who the process is", id, cur.identity)
	}
	m.cur.Store(&loaded{pool: pool, cert: cert, identity: id, notAfter: leaf.NotAfter})
	return nil
}

// Identity is the holder's own identity.
func (m *Material) Identity() Identity { return m.cur.Load().identity }

// NotAfter is when the certificate in use expires.
func (m *Material) NotAfter() time.Time { return m.cur.Load().notAfter }

// Pool is the CA pool in use.
func (m *Material) Pool() *x509.CertPool { return m.cur.Load().pool }

// verifyPeer checks a peer's chain against the current CA and returns its
// identity.
func (m *Material) verifyPeer(certs []*x509.Certificate, usage x509.ExtKeyUsage) (Identity, error) {
	if len(certs) == 0 {
		return Identity{}, errors.New("no certificate presented")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: m.Pool(), Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return Identity{}, fmt.Errorf("certificate not signed by the cluster CA: %w", err)
	}
	return IdentityOf(certs[0])
}

// ClientAuth says how a listener treats clients' certificates.
type ClientAuth int

const (
	// ClientCertOptional verifies a certificate when one is presented
	// (the HTTP API: operators may come with a token alone).
	ClientCertOptional ClientAuth = iota
	// ClientCertRequired refuses a client without one (Raft).
	ClientCertRequired
)

// ServerConfig is the TLS configuration of a listener. allow, when set,
// accepts or refuses a client by its verified identity (Raft accepts
// servers only).
func (m *Material) ServerConfig(auth ClientAuth, allow func(Identity) error) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cur := m.cur.Load()
			c := &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{cur.cert},
				ClientCAs:    cur.pool,
				ClientAuth:   tls.VerifyClientCertIfGiven,
				NextProtos:   []string{"http/1.1"},
			}
			if auth == ClientCertRequired {
				c.ClientAuth = tls.RequireAndVerifyClientCert
			}
			if allow != nil {
				c.VerifyConnection = func(cs tls.ConnectionState) error {
					if len(cs.PeerCertificates) == 0 {
						return allow(Identity{})
					}
					id, err := IdentityOf(cs.PeerCertificates[0])
					if err != nil {
						return err
					}
					return allow(id)
				}
			}
			return c, nil
		},
	}
}

// ClientConfig is the TLS configuration for dialing another herd process
// that must hold the role want: its chain is checked against the current
// CA and its identity's role, not a host name, since replicas are reached
// at whatever addresses they advertise. The holder's own certificate goes
// with every handshake.
func (m *Material) ClientConfig(want Role) *tls.Config {
	return m.clientConfig(func(id Identity) error {
		if id.Role != want {
			return fmt.Errorf("peer %s is not a %s", id, want)
		}
		return nil
	})
}

// ClientConfigFor is ClientConfig for one holder: the peer must hold
// exactly the identity want (a server that reads a node's logs reaches
// that node's agent, not whatever answers at its address).
func (m *Material) ClientConfigFor(want Identity) *tls.Config {
	return m.clientConfig(func(id Identity) error {
		if id != want {
			return fmt.Errorf("peer %s is not %s", id, want)
		}
		return nil
	})
}

func (m *Material) clientConfig(check func(Identity) error) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verification is done below, against the CA of the moment.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c := m.cur.Load().cert
			return &c, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := m.verifyPeer(cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
			if err != nil {
				return err
			}
			return check(id)
		},
	}
}

// RequireRole is an allow function for ServerConfig.
func RequireRole(want Role) func(Identity) error {
	return func(id Identity) error {
		if id.Role != want {
			if id.Role == "" {
				return fmt.Errorf("a %s certificate is required", want)
			}
			return fmt.Errorf("%s may not connect here: only a %s", id, want)
		}
		return nil
	}
}

// handshakeTimeout bounds a TLS handshake, so that a peer that connects
// and says nothing holds a goroutine for no longer than this.
const handshakeTimeout = 10 * time.Second

// Dial opens a TCP connection with dial and completes a TLS handshake
// with the client configuration, within ctx.
func Dial(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), addr string, cfg *tls.Config) (net.Conn, error) {
	raw, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := tls.Client(raw, cfg)
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	if err := c.HandshakeContext(hctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	return c, nil
}

// Listener accepts TLS connections; each completes its handshake, within
// handshakeTimeout, on first use.
func Listener(ln net.Listener, cfg *tls.Config) net.Listener {
	return &listener{Listener: ln, cfg: cfg}
}

type listener struct {
	net.Listener
	cfg *tls.Config
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &serverConn{Conn: tls.Server(c, l.cfg)}, nil
}

// serverConn runs the handshake under a deadline before the first read or
// write.
type serverConn struct {
	*tls.Conn
}

func (c *serverConn) handshake() error {
	if c.ConnectionState().HandshakeComplete {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	return c.HandshakeContext(ctx)
}

func (c *serverConn) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *serverConn) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}
