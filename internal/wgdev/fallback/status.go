package fallback

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"slices"
	"time"

	"github.com/fednet/fednet/internal/atomicfile"
	"github.com/fednet/fednet/internal/backend"
)

// Status is what a bind reports of its fallback, in its status file
// (JSON, these names).
type Status struct {
	// ListenPort is the TCP port streams are accepted on, 0 for none.
	ListenPort uint16 `json:"listenPort"`
	// DialPort is the TCP port peers' streams are dialed on, 0 when the
	// bind does not fall back.
	DialPort uint16 `json:"dialPort"`
	// TCP lists the peer endpoints (ip:port, as the device reports a
	// peer's endpoint) whose packets go over a stream now, sorted: the
	// UDP endpoints of links moved to a stream we dialed, and the remote
	// addresses of the streams peers dialed to us.
	TCP []string `json:"tcp"`
}

// Transport returns the transport of the link whose endpoint (as the
// device reports it) is endpoint.
func (s Status) Transport(endpoint string) backend.Transport {
	if endpoint != "" && slices.Contains(s.TCP, endpoint) {
		return backend.TransportTCP443
	}
	return backend.TransportUDP
}

// ReadStatus reads a status file.
func ReadStatus(path string) (Status, error) {
	var s Status
	b, err := os.ReadFile(path)
	if err != nil {
		return s, fmt.Errorf("reading the fallback status: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("reading the fallback status %s: %w", path, err)
	}
	return s, nil
}

// Status returns the bind's status now.
func (b *Bind) Status() Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.statusLocked()
}

func (b *Bind) statusLocked() Status {
	s := Status{ListenPort: b.cfg.ListenPort, DialPort: b.cfg.DialPort, TCP: []string{}}
	for dst := range b.dialed {
		if b.policy.Via(dst) == backend.TransportTCP443 {
			s.TCP = append(s.TCP, dst.String())
		}
	}
	for st := range b.accepted {
		if st.up {
			s.TCP = append(s.TCP, st.c.RemoteAddr().String())
		}
	}
	slices.Sort(s.TCP)
	return s
}

// writeStatusLocked writes the status file when the status changed.
func (b *Bind) writeStatusLocked() {
	s := b.statusLocked()
	if b.cfg.StatusPath == "" || (b.status.TCP != nil && slices.Equal(s.TCP, b.status.TCP)) {
		b.status = s
		return
	}
	b.status = s
	data, _ := json.Marshal(s)
	if err := atomicfile.Write(b.cfg.StatusPath, data, 0o644); err != nil {
		b.logf("fallback: %v", err)
	}
}

// SelfSigned returns a fresh self-signed ECDSA P-256 certificate for name,
// valid from an hour ago for a year: the certificate of a bind's listener
// when none is configured. Peers do not check it (package doc).
func SelfSigned(name string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("making the fallback's TLS key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("making the fallback's TLS certificate: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("making the fallback's TLS certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
