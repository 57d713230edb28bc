package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// Validities: a CA outlives many rotations of the certificates it signs.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultCertValidity = 365 * 24 * time.Hour
)

// File names under a certificate directory.
const (
	CAFile    = "ca.pem"
	CAKeyFile = "ca-key.pem"
)

// CertFile and KeyFile are where a holder's certificate and key live.
func CertFile(dir, id string) string { return filepath.Join(dir, id+".pem") }

// KeyFile is the private key beside CertFile.
func KeyFile(dir, id string) string { return filepath.Join(dir, id+"-key.pem") }

// CreateCA writes a new cluster CA (ECDSA P-256) to dir/ca.pem and
// dir/ca-key.pem. It refuses to overwrite an existing CA: every
// certificate the old one signed would stop being trusted.
func CreateCA(dir, name string, validity time.Duration) error {
	if validity <= 0 {
		validity = DefaultCAValidity
	}
	if name == "" {
		name = "herd cluster CA"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"herd"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("sign CA certificate: %w", err)
	}
	return writePair(filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile), der, key)
}

// CertRequest says what certificate to issue.
type CertRequest struct {
	Identity Identity
	// Hosts are DNS names and IP addresses the holder serves on (servers
	// and agents); loopback is always added for servers, so that a
	// replica can be reached on its own machine.
	Hosts    []string
	Validity time.Duration
}

// CreateCert signs a certificate with the CA in dir and writes it with
// its key to dir/ID.pem and dir/ID-key.pem (replacing an older pair,
// which is how certificates are rotated). It returns the certificate
// file's path.
func CreateCert(dir string, req CertRequest) (string, error) {
	if err := req.Identity.Validate(); err != nil {
		return "", err
	}
	if req.Validity <= 0 {
		req.Validity = DefaultCertValidity
	}
	caCert, caKey, err := loadCA(dir)
	if err != nil {
		return "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", fmt.Errorf("generate key: %w", err)
	}
	now := time.Now()
	notAfter := now.Add(req.Validity)
	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: req.Identity.ID, OrganizationalUnit: []string{string(req.Identity.Role)}, Organization: []string{"herd"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		URIs:         []*url.URL{req.Identity.URI()},
	}
	switch req.Identity.Role {
	case RoleClient:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	default:
		// Servers and agents both serve and dial.
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	hosts := req.Hosts
	if req.Identity.Role == RoleServer {
		hosts = append(hosts, "localhost", "127.0.0.1", "::1")
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		if h == "" || seen[h] {
			continue
		}
		seen[h] = true
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return "", fmt.Errorf("sign certificate: %w", err)
	}
	certPath, keyPath := CertFile(dir, req.Identity.ID), KeyFile(dir, req.Identity.ID)
	if err := writePair(certPath, keyPath, der, key); err != nil {
		return "", err
	}
	return certPath, nil
}

func loadCA(dir string) (*x509.Certificate, crypto.Signer, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("no CA in %s (create one with herd tls ca create -dir %s): %w", dir, dir, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("load CA from %s: %w", dir, err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, nil, fmt.Errorf("%s is not a CA certificate", filepath.Join(dir, CAFile))
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, nil, errors.New("CA key cannot sign")
	}
	return cert, signer, nil
}

// writePair writes a certificate (0644) and its key (0600), each through a
// temporary file renamed into place, so that a process reloading them
// never reads half a file. A CA is never overwritten.
func writePair(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	if filepath.Base(certPath) == CAFile {
		if _, err := os.Stat(certPath); err == nil {
			return fmt.Errorf("%s exists; remove it first to replace the CA (every certificate it signed stops being trusted)", certPath)
		}
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode key: %w", err)
	}
	if err := writeAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	err = tmp.Chmod(mode)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return n
}
