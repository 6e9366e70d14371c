package lab

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Charon is strongSwan's IKE daemon as the lab runs it for one node: its
// own directory is the daemon's /run (its pid file, its vici socket, its
// log), in a private mount namespace, so several charons run on one
// machine, one per network namespace.
type Charon struct {
	// Dir is the daemon's directory (seen as /run by the daemon).
	Dir string
	// Socket is its vici socket as seen from outside.
	Socket string
	// Process is the daemon.
	Process *Process
}

// CharonPath is where Debian's strongswan-charon installs the daemon.
const CharonPath = "/usr/lib/ipsec/charon"

// charonConf is the lab's strongswan.conf: userspace ESP (kernel-libipsec:
// the lab's kernel has no ESP ciphers) whose TUN is ipsec0; charon's own
// routes go to table 220, consulted after main, so the routes fednet
// plans decide; short retransmissions so an unreachable peer is reported
// in seconds.
const charonConf = `charon {
  load_modular = no
  load = random nonce openssl aes sha1 sha2 hmac gcm chapoly curve25519 kdf pem pkcs1 x509 pubkey vici kernel-libipsec kernel-netlink socket-default
  install_virtual_ip = no
  install_routes = no
  routing_table = 220
  routing_table_prio = 32800
  retransmit_tries = 3
  retransmit_timeout = 1.0
  retransmit_base = 1.4
  plugins {
    vici {
      socket = unix:///run/charon.vici
    }
  }
  filelog {
    lab {
      path = /run/charon.log
      time_format = %T
      flush_line = yes
      default = 1
    }
  }
}
`

// externalCharonConf is charonConf for a node standing in for a
// provider's VPN gateway (RoleExternal): its routes into the tunnel
// (table 220) come before the main table, as a standalone strongSwan's
// do, since nothing else routes there.
var externalCharonConf = strings.NewReplacer("routing_table_prio = 32800", "routing_table_prio = 220", "install_routes = no", "install_routes = yes").Replace(charonConf)

// charonPluginDir is where Debian installs strongSwan's plugins.
const charonPluginDir = "/usr/lib/ipsec/plugins"

// charonPackages are the plugins charonConf loads that do not come with
// charon itself, and the Debian package of each. Without openssl, charon
// starts but proposes nothing the lab's links ask for and sends no IKE.
var charonPackages = map[string]string{
	"openssl":         "libstrongswan-standard-plugins",
	"kernel-libipsec": "libcharon-extra-plugins",
	"curve25519":      "libstrongswan-extra-plugins",
	"chapoly":         "libstrongswan-extra-plugins",
	"vici":            "strongswan-swanctl",
}

// charonPlugins reports which of charonPackages' plugins dir lacks,
// naming the packages to install.
func charonPlugins(dir string) error {
	var missing []string
	for _, plugin := range slices.Sorted(maps.Keys(charonPackages)) {
		if _, err := os.Stat(filepath.Join(dir, "libstrongswan-"+plugin+".so")); err != nil {
			missing = append(missing, plugin+" ("+charonPackages[plugin]+")")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the IPsec lab needs strongSwan's plugins %s in %s: install those Debian packages (make deps)", strings.Join(missing, ", "), dir)
	}
	return nil
}

// StartCharon starts a charon in node n (a gateway, or a node standing in
// for a provider's VPN gateway: externalCharonConf) with the lab's
// configuration and waits until its vici socket answers. The process ends with (*Lab).Down or its
// Stop.
func (l *Lab) StartCharon(ctx context.Context, n *Node) (*Charon, error) {
	if _, err := os.Stat(CharonPath); err != nil {
		return nil, fmt.Errorf("the IPsec lab needs strongSwan's charon at %s (Debian packages strongswan-charon, libcharon-extra-plugins; make deps): %w", CharonPath, err)
	}
	if err := charonPlugins(charonPluginDir); err != nil {
		return nil, err
	}
	dir := filepath.Join(l.Dir, "charon-"+strings.TrimPrefix(n.Namespace, nsPrefix(l.Name)))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("charon of %s: %w", n.Name, err)
	}
	conf := charonConf
	if n.Role == RoleExternal {
		conf = externalCharonConf
	}
	if err := os.WriteFile(filepath.Join(dir, "strongswan.conf"), []byte(conf), 0o600); err != nil {
		return nil, fmt.Errorf("charon of %s: %w", n.Name, err)
	}
	script := `mount --bind "$1" /run && STRONGSWAN_CONF=/run/strongswan.conf exec ` + CharonPath
	var p *Process
	var err error
	if n.Role == RoleGateway {
		p, err = l.Start(n, "sh", "-c", script, "sh", dir)
	} else {
		p, err = l.Start(n, "unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", dir)
	}
	if err != nil {
		return nil, err
	}
	c := &Charon{Dir: dir, Socket: filepath.Join(dir, "charon.vici"), Process: p}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if conn, err := net.Dial("unix", c.Socket); err == nil {
			conn.Close()
			break
		}
		var why error
		switch {
		case p.Exited():
			why = fmt.Errorf("charon in %s exited: %v: %s", n.Name, p.Err(), tail(p.LogText(), 1000))
		case time.Now().After(deadline):
			why = fmt.Errorf("charon in %s: no vici socket at %s after 10 s", n.Name, c.Socket)
		case ctx.Err() != nil:
			why = ctx.Err()
		}
		if why != nil {
			p.Stop(context.WithoutCancel(ctx))
			return nil, why
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c, nil
}

// Log returns the charon's log file's contents ("" when unreadable).
func (c *Charon) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "charon.log"))
	return string(b)
}

// EnsurePSK writes a fresh random pre-shared key to path when it does not
// exist; it writes only inside the lab's directory and refuses any other
// missing path.
func (l *Lab) EnsurePSK(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pre-shared key %s: %w", path, err)
	}
	rel, err := filepath.Rel(l.Dir, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("pre-shared key %s does not exist and is outside the lab's directory %s; create it, or name a file under the lab's directory", path, l.Dir)
	}
	b := make([]byte, 32)
	rand.Read(b)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(b)+"\n"), 0o600)
}
