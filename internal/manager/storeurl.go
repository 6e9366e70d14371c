package manager

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fednet/fednet/internal/manager/store"
	"github.com/fednet/fednet/internal/manager/store/etcd"
)

// StoreConfig says which store fednet manager uses (--store and the etcd
// TLS flags).
type StoreConfig struct {
	// URL is the store:
	//
	//	""                        the SQLite database in DataDir (fednet.db)
	//	sqlite://PATH             a SQLite database file (sqlite:///abs/path)
	//	etcd://H1:P1,H2:P2[/PFX/] an etcd cluster (key prefix /PFX/, default
	//	                          /fednet/); TLS when EtcdCA, EtcdCert or
	//	                          EtcdKey is set
	URL string
	// DataDir is the manager's data directory. Required.
	DataDir string
	// Reinitialize allows a SQLite database to be created empty in a data
	// directory that held a manager (see OpenStore).
	Reinitialize bool
	// EtcdCA is a PEM file of the CA that signed the etcd members'
	// certificates; EtcdCert and EtcdKey are the manager's client
	// certificate and key (PEM), for clusters that require one.
	EtcdCA, EtcdCert, EtcdKey string
}

// OpenStoreURL opens the store cfg names. The caller closes it. Errors name
// the flag at fault and what would be valid.
func OpenStoreURL(ctx context.Context, cfg StoreConfig) (store.Store, error) {
	raw := strings.TrimSpace(cfg.URL)
	etcdTLS := cfg.EtcdCA != "" || cfg.EtcdCert != "" || cfg.EtcdKey != ""
	scheme, rest, ok := strings.Cut(raw, "://")
	if raw != "" && !ok {
		return nil, fmt.Errorf("--store %q: want sqlite://PATH or etcd://HOST:PORT[,HOST:PORT...]", cfg.URL)
	}
	if etcdTLS && scheme != "etcd" {
		return nil, errors.New("--etcd-ca, --etcd-cert and --etcd-key are for an etcd store (--store etcd://...)")
	}
	switch scheme {
	case "":
		return OpenStore(ctx, cfg.DataDir, cfg.Reinitialize)
	case "sqlite":
		if rest == "" {
			return nil, fmt.Errorf("--store %q: no file; want sqlite://PATH (sqlite:///var/lib/fednet/fednet.db)", cfg.URL)
		}
		return openSQLiteAt(ctx, cfg.DataDir, filepath.Clean(rest), cfg.Reinitialize)
	case "etcd":
		return openEtcd(ctx, cfg, rest)
	}
	return nil, fmt.Errorf("--store %q: unknown store %q; want sqlite://PATH or etcd://HOST:PORT[,HOST:PORT...]", cfg.URL, scheme)
}

// openEtcd opens the etcd store of etcd://rest.
func openEtcd(ctx context.Context, cfg StoreConfig, rest string) (store.Store, error) {
	hosts, prefix, _ := strings.Cut(rest, "/")
	if prefix != "" {
		prefix = "/" + strings.Trim(prefix, "/") + "/"
	}
	var tlsCfg *tls.Config
	scheme := "http://"
	if cfg.EtcdCA != "" || cfg.EtcdCert != "" || cfg.EtcdKey != "" {
		var err error
		if tlsCfg, err = etcdTLS(cfg); err != nil {
			return nil, err
		}
		scheme = "https://"
	}
	var endpoints []string
	for _, h := range strings.Split(hosts, ",") {
		h = strings.TrimSpace(h)
		if h == "" || strings.ContainsAny(h, " ?#@") {
			return nil, fmt.Errorf("--store etcd://%s: %q is not HOST:PORT; want etcd://HOST:PORT[,HOST:PORT...]", rest, h)
		}
		if !strings.Contains(h, ":") || strings.HasSuffix(h, "]") {
			h += ":2379"
		}
		endpoints = append(endpoints, scheme+h)
	}
	s, err := etcd.Open(ctx, etcd.Config{Endpoints: endpoints, TLS: tlsCfg, Prefix: prefix})
	if err != nil {
		return nil, fmt.Errorf("--store etcd://%s: %w", rest, err)
	}
	return s, nil
}

// etcdTLS loads the etcd TLS flags' files.
func etcdTLS(cfg StoreConfig) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.EtcdCA != "" {
		pemData, err := os.ReadFile(cfg.EtcdCA)
		if err != nil {
			return nil, fmt.Errorf("--etcd-ca: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pemData) {
			return nil, fmt.Errorf("--etcd-ca %s holds no PEM certificate", cfg.EtcdCA)
		}
	}
	if (cfg.EtcdCert == "") != (cfg.EtcdKey == "") {
		return nil, errors.New("--etcd-cert and --etcd-key go together: the manager's client certificate and its key")
	}
	if cfg.EtcdCert != "" {
		pair, err := tls.LoadX509KeyPair(cfg.EtcdCert, cfg.EtcdKey)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cert/--etcd-key: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}
