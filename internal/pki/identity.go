// Package pki makes and reads herd's certificates: a cluster CA, and
// certificates that carry their holder's role (server, agent or client)
// and id, so that a certificate issued to an agent cannot act as a server
// or as another agent. It also keeps a process's TLS material current
// across reloads (rotation without a restart).
package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"herd/internal/check"
)

// Role is what a certificate's holder is in the cluster.
type Role string

// The roles a certificate can carry.
const (
	RoleServer Role = "server"
	RoleAgent  Role = "agent"
	RoleClient Role = "client"
)

// Valid reports whether r is one of the roles.
func (r Role) Valid() bool { return r == RoleServer || r == RoleAgent || r == RoleClient }

// identityScheme is the URI scheme of the SAN that names a holder:
// herd://ROLE/ID.
const identityScheme = "herd"

// Identity is who presented a certificate: its role and id (a server id,
// a node id, or a client's name).
type Identity struct {
	Role Role
	ID   string
}

func (i Identity) String() string { return string(i.Role) + "/" + i.ID }

// URI is the SAN that carries the identity in a certificate.
func (i Identity) URI() *url.URL {
	return &url.URL{Scheme: identityScheme, Host: string(i.Role), Path: "/" + i.ID}
}

// Validate checks the role and the id.
func (i Identity) Validate() error {
	if !i.Role.Valid() {
		return fmt.Errorf("unknown certificate role %q (want server, agent or client)", i.Role)
	}
	if !check.ID(i.ID) {
		return fmt.Errorf("%q is not a valid id: 1 to 64 letters, digits, '.', '_' or '-'", i.ID)
	}
	return nil
}

// ParseIdentity reads "ROLE/ID" (the form String writes and the forwarded
// identity header carries).
func ParseIdentity(s string) (Identity, error) {
	role, id, ok := strings.Cut(s, "/")
	if !ok {
		return Identity{}, fmt.Errorf("identity %q: want ROLE/ID", s)
	}
	i := Identity{Role: Role(role), ID: id}
	if err := i.Validate(); err != nil {
		return Identity{}, fmt.Errorf("identity %q: %w", s, err)
	}
	return i, nil
}

// ParseIdentityURI reads an identity SAN, herd://ROLE/ID.
func ParseIdentityURI(u *url.URL) (Identity, error) {
	if u == nil || u.Scheme != identityScheme {
		return Identity{}, errors.New("not a herd identity")
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return Identity{}, fmt.Errorf("identity %q: unexpected parts", u.String())
	}
	id, ok := strings.CutPrefix(u.Path, "/")
	if !ok {
		return Identity{}, fmt.Errorf("identity %q: no id", u.String())
	}
	i := Identity{Role: Role(u.Host), ID: id}
	if err := i.Validate(); err != nil {
		return Identity{}, fmt.Errorf("identity %q: %w", u.String(), err)
	}
	return i, nil
}

// IdentityOf reads the identity a verified certificate carries. A
// certificate must name exactly one: two would let its holder pick.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	var found []Identity
	for _, u := range cert.URIs {
		if u.Scheme != identityScheme {
			continue
		}
		i, err := ParseIdentityURI(u)
		if err != nil {
			return Identity{}, err
		}
		found = append(found, i)
	}
	switch len(found) {
	case 0:
		return Identity{}, fmt.Errorf("certificate %q names no herd identity (make it with herd tls cert create)", cert.Subject.CommonName)
	case 1:
		return found[0], nil
	default:
		return Identity{}, fmt.Errorf("certificate %q names %d herd identities; it must name one", cert.Subject.CommonName, len(found))
	}
}
