// Package clienttest holds test doubles for code that talks to a manager
// through package client: a certificate authority that issues server
// certificates the way the manager's does (a leaf for the listen address,
// presented with its CA), and an HTTPS test server that uses one.
package clienttest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// CA is a certificate authority for tests.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA returns a new CA valid from an hour ago for a day.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, key: key}, nil
}

// Fingerprint is the hex SHA-256 of the CA certificate's DER bytes, the
// value client.Config.CAFingerprint pins.
func (ca *CA) Fingerprint() string {
	sum := sha256.Sum256(ca.Cert.Raw)
	return hex.EncodeToString(sum[:])
}

// LeafOptions shape a server certificate.
type LeafOptions struct {
	// Hosts are DNS names or IP addresses the certificate is valid for.
	Hosts []string
	// NotAfter defaults to a day from now.
	NotAfter time.Time
	// WithoutCA leaves the CA certificate out of the presented chain.
	WithoutCA bool
}

// Leaf issues a server certificate; the chain is the leaf, then the CA.
func (ca *CA) Leaf(opt LeafOptions) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	if opt.NotAfter.IsZero() {
		opt.NotAfter = time.Now().Add(24 * time.Hour)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "fednet manager (test)"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     opt.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range opt.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return tls.Certificate{}, err
	}
	chain := [][]byte{der}
	if !opt.WithoutCA {
		chain = append(chain, ca.Cert.Raw)
	}
	return tls.Certificate{Certificate: chain, PrivateKey: key}, nil
}

// Server is an HTTPS test server presenting a leaf for 127.0.0.1 and its
// CA, like the manager.
type Server struct {
	*httptest.Server
	CA *CA
}

// Fingerprint is the CA fingerprint clients pin.
func (s *Server) Fingerprint() string { return s.CA.Fingerprint() }

// NewServer starts a TLS 1.3 server for h on 127.0.0.1 and closes it at
// the end of the test.
func NewServer(t testing.TB, h http.Handler) *Server {
	t.Helper()
	ca, err := NewCA("fednet test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Leaf(LeafOptions{Hosts: []string{"127.0.0.1", "localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	return NewServerWith(t, h, ca, &tls.Config{Certificates: []tls.Certificate{leaf}, MinVersion: tls.VersionTLS13})
}

// NewServerWith starts a server with the given TLS configuration (to test
// what clients do with bad certificates or old TLS versions).
func NewServerWith(t testing.TB, h http.Handler, ca *CA, cfg *tls.Config) *Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = cfg
	// Handshakes that clients refuse are the point of some tests.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return &Server{Server: srv, CA: ca}
}

// String names the server for messages.
func (s *Server) String() string { return fmt.Sprintf("test manager at %s", s.URL) }
