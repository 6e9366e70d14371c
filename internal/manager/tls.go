package manager

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Files of the data directory besides the database.
const (
	CACertFile     = "ca.crt"      // the CA certificate (PEM); agents pin its SHA-256
	CAKeyFile      = "ca.key"      // the CA private key (PEM, mode 0600)
	ServerCertFile = "server.crt"  // the server certificate (PEM), signed by the CA
	ServerKeyFile  = "server.key"  // its private key (PEM, mode 0600)
	AdminTokenFile = "admin.token" // the admin bearer token (mode 0600)
)

// Certificate lifetimes. The server certificate is renewed when less than
// serverRenew of it is left, at start and while serving.
const (
	caLifetime     = 10 * 365 * 24 * time.Hour
	serverLifetime = 365 * 24 * time.Hour
	serverRenew    = 30 * 24 * time.Hour
	clockSkew      = time.Hour // certificates start this long before now
)

// certs holds the manager's CA and its current server certificate.
type certs struct {
	dir  string
	now  func() time.Time
	sans []string // sorted: IP addresses and DNS names

	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey

	mu     sync.Mutex // guards server
	server *tls.Certificate
}

// loadCerts reads the CA and server certificate from dir, creating the CA
// if there is none and (re)issuing the server certificate when it is
// missing, not for exactly sans, not from this CA, or close to expiry.
func loadCerts(dir string, sans []string, now func() time.Time, logf func(string, ...any)) (*certs, error) {
	c := &certs{dir: dir, now: now, sans: sans}
	if err := c.loadCA(logf); err != nil {
		return nil, err
	}
	srv, err := c.loadServer()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			logf("issuing a server certificate for %s", strings.Join(sans, ", "))
		} else {
			logf("issuing a new server certificate for %s: %v", strings.Join(sans, ", "), err)
		}
		if srv, err = c.issueServer(); err != nil {
			return nil, err
		}
	}
	c.server = srv
	return c, nil
}

// fingerprint is the hex SHA-256 of the CA certificate's DER bytes.
func (c *certs) fingerprint() string {
	sum := sha256.Sum256(c.ca.Raw)
	return hex.EncodeToString(sum[:])
}

func (c *certs) path(name string) string { return filepath.Join(c.dir, name) }

func (c *certs) loadCA(logf func(string, ...any)) error {
	certPEM, errCert := os.ReadFile(c.path(CACertFile))
	keyPEM, errKey := os.ReadFile(c.path(CAKeyFile))
	switch {
	case errors.Is(errCert, fs.ErrNotExist) && errors.Is(errKey, fs.ErrNotExist):
		logf("creating a new certificate authority in %s", c.dir)
		return c.createCA()
	case errCert != nil:
		return fmt.Errorf("reading the CA certificate: %w", errCert)
	case errKey != nil:
		return fmt.Errorf("reading the CA key: %w (%s is there without %s; restore both from a backup, or remove %s to make a new CA, which every agent must then be enrolled again for)",
			errKey, CACertFile, CAKeyFile, CACertFile)
	}
	checkMode(c.path(CAKeyFile), logf)
	cert, key, err := parsePair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("CA in %s: %w", c.dir, err)
	}
	if !cert.IsCA {
		return fmt.Errorf("CA in %s: %s is not a CA certificate", c.dir, CACertFile)
	}
	c.ca, c.caKey = cert, key
	return nil
}

func (c *certs) createCA() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating the CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return err
	}
	now := c.now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "fednet manager CA", Organization: []string{"fednet"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("creating the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return fmt.Errorf("creating the CA certificate: %w", err)
	}
	// Key first: a crash in between leaves a key without a certificate,
	// which the next start overwrites, never a certificate without a key.
	if err := writeKey(c.path(CAKeyFile), key); err != nil {
		return err
	}
	if err := writeFileAtomic(c.path(CACertFile), pemCert(der), 0o644); err != nil {
		return err
	}
	c.ca, c.caKey = cert, key
	return nil
}

// loadServer reads the server certificate and checks that it fits.
func (c *certs) loadServer() (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(c.path(ServerCertFile))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(c.path(ServerKeyFile))
	if err != nil {
		return nil, err
	}
	cert, key, err := parsePair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	if err := cert.CheckSignatureFrom(c.ca); err != nil {
		return nil, fmt.Errorf("%s is not signed by %s", ServerCertFile, CACertFile)
	}
	if got := certSANs(cert); !slices.Equal(got, c.sans) {
		return nil, fmt.Errorf("names changed from %v to %v", got, c.sans)
	}
	if c.now().Add(serverRenew).After(cert.NotAfter) {
		return nil, fmt.Errorf("%s expires at %s", ServerCertFile, cert.NotAfter.Format(time.RFC3339))
	}
	return c.tlsCert(cert, key), nil
}

func (c *certs) tlsCert(leaf *x509.Certificate, key *ecdsa.PrivateKey) *tls.Certificate {
	return &tls.Certificate{
		Certificate: [][]byte{leaf.Raw, c.ca.Raw}, // leaf and CA: agents pin the CA
		PrivateKey:  key,
		Leaf:        leaf,
	}
}

// issueServer makes, stores and returns a new server certificate.
func (c *certs) issueServer() (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the server key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := c.now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "fednet manager", Organization: []string{"fednet"}},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(serverLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range c.sans {
		if ip, err := netip.ParseAddr(n); err == nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(ip.AsSlice()))
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	if len(c.sans) > 0 {
		tmpl.Subject.CommonName = c.sans[0]
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.ca, &key.PublicKey, c.caKey)
	if err != nil {
		return nil, fmt.Errorf("creating the server certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("creating the server certificate: %w", err)
	}
	if err := writeKey(c.path(ServerKeyFile), key); err != nil {
		return nil, err
	}
	if err := writeFileAtomic(c.path(ServerCertFile), pemCert(der), 0o644); err != nil {
		return nil, err
	}
	return c.tlsCert(cert, key), nil
}

// current returns the server certificate, renewing it first when it is
// close to expiry (a manager may run longer than one certificate lasts).
// Safe for concurrent use.
func (c *certs) current(logf func(string, ...any)) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now().Add(serverRenew).After(c.server.Leaf.NotAfter) {
		srv, err := c.issueServer()
		if err != nil {
			logf("renewing the server certificate: %v; serving the old one", err)
			return c.server, nil
		}
		c.server = srv
	}
	return c.server, nil
}

// certSANs returns the names of cert in the form of certs.sans.
func certSANs(cert *x509.Certificate) []string {
	var out []string
	for _, ip := range cert.IPAddresses {
		if a, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, a.Unmap().String())
		}
	}
	out = append(out, cert.DNSNames...)
	slices.Sort(out)
	return slices.Compact(out)
}

// normalizeSANs checks names (IP addresses or DNS names), normalizes,
// sorts and dedupes them.
func normalizeSANs(names []string) ([]string, error) {
	var out []string
	for _, n := range names {
		n = strings.TrimSpace(n)
		if a, err := netip.ParseAddr(strings.Trim(n, "[]")); err == nil {
			if a.Zone() != "" {
				return nil, fmt.Errorf("SAN %q: an address with a zone cannot be in a certificate; give it without %%%s", n, a.Zone())
			}
			out = append(out, a.Unmap().String())
			continue
		}
		n = strings.ToLower(strings.TrimSuffix(n, "."))
		if !validDNSName(n) {
			return nil, fmt.Errorf("SAN %q is neither an IP address nor a DNS name (like manager.example.com or *.example.com)", n)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func validDNSName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for i, label := range strings.Split(s, ".") {
		if label == "*" && i == 0 {
			continue
		}
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

func randomSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("making a serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", filepath.Base(path), err)
	}
	return writeFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

// parsePair decodes a PEM certificate and its PEM PKCS#8 ECDSA key and
// checks that they belong together.
func parsePair(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, errors.New("certificate file holds no PEM CERTIFICATE")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing certificate: %w", err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, nil, errors.New("key file holds no PEM PRIVATE KEY")
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing key: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("key is a %T, want ECDSA", k)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, nil, errors.New("the key does not belong to the certificate")
	}
	return cert, key, nil
}

// writeFileAtomic replaces path with data (mode perm) so that a crash
// leaves the old or the new content, never a mix.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// checkMode warns when a secret file is readable by others.
func checkMode(path string, logf func(string, ...any)) {
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		logf("warning: %s is readable by others (mode %v); chmod 600 it", path, fi.Mode().Perm())
	}
}
