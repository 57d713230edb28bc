package localcluster

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"

	"herd/config"
	"herd/internal/pki"
)

// Secure makes a CA under dir, issues each replica a server certificate
// and turns on TLS and ACLs in cfgs.
func Secure(dir string, cfgs []config.Server) error {
	if err := pki.CreateCA(dir, "", 0); err != nil {
		return err
	}
	for i := range cfgs {
		id := pki.Identity{Role: pki.RoleServer, ID: cfgs[i].ID}
		if _, err := pki.CreateCert(dir, pki.CertRequest{Identity: id}); err != nil {
			return fmt.Errorf("certificate of %s: %w", id, err)
		}
		cfgs[i].TLSCAFile = filepath.Join(dir, pki.CAFile)
		cfgs[i].TLSCertFile = pki.CertFile(dir, cfgs[i].ID)
		cfgs[i].TLSKeyFile = pki.KeyFile(dir, cfgs[i].ID)
		cfgs[i].ACL = true
	}
	return nil
}

// IssueTo issues a certificate from the CA under dir and returns the
// files naming it.
func IssueTo(dir string, id pki.Identity) (pki.Files, error) {
	if _, err := pki.CreateCert(dir, pki.CertRequest{Identity: id}); err != nil {
		return pki.Files{}, err
	}
	return pki.Files{CA: filepath.Join(dir, pki.CAFile), Cert: pki.CertFile(dir, id.ID), Key: pki.KeyFile(dir, id.ID)}, nil
}

// ClientTLS trusts the CA under dir (host names checked as usual: the
// replicas' certificates name loopback).
func ClientTLS(dir string) (*tls.Config, error) {
	raw, err := os.ReadFile(filepath.Join(dir, pki.CAFile))
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw) {
		return nil, fmt.Errorf("%s holds no certificate", filepath.Join(dir, pki.CAFile))
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
