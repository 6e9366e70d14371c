package demo

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// IPsecGateway reports whether gateway g of site s has a link on backend
// ipsec in f (so it needs strongSwan's charon).
func IPsecGateway(f *spec.Federation, s *spec.Site) bool {
	for _, r := range f.Sites {
		if r.Name != s.Name && f.LinkEnabled(s.Name, r.Name) && f.LinkBackend(s.Name, r.Name) == backend.IPsec {
			return true
		}
	}
	return false
}

// startIPsec starts the charon of gateway gw when its site has IPsec
// links, writing the federation's pre-shared key file first if the lab
// owns its path, and returns the agent's extra arguments (--ipsec-vici).
func (d *Deployment) startIPsec(ctx context.Context, gw *lab.Node) ([]string, error) {
	c, err := StartGatewayCharon(ctx, d.Lab, d.Federation, gw)
	if c == nil || err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.charons == nil {
		d.charons = map[string]*lab.Charon{}
	}
	d.charons[gw.Name] = c
	d.mu.Unlock()
	return []string{"--ipsec-vici", c.Socket}, nil
}

// StartGatewayCharon starts the charon of gateway gw of f when its site
// has IPsec links (nil, nil when it has none), writing the federation's
// pre-shared key file first if the lab owns its path. The agent takes
// "--ipsec-vici", c.Socket.
func StartGatewayCharon(ctx context.Context, l *lab.Lab, f *spec.Federation, gw *lab.Node) (*lab.Charon, error) {
	site, ok := f.Site(gw.Site)
	if !ok || !IPsecGateway(f, site) {
		return nil, nil
	}
	if f.Overlay.IPsec != nil && f.UsesBackend(backend.IPsec) {
		if err := l.EnsurePSK(f.Overlay.IPsec.PSK.File); err != nil {
			return nil, err
		}
	}
	c, err := l.StartCharon(ctx, gw)
	if err != nil {
		return nil, fmt.Errorf("IPsec for %s: %w", gw.Name, err)
	}
	return c, nil
}

// Charon returns the IPsec daemon of a gateway, or nil.
func (d *Deployment) Charon(gateway string) *lab.Charon {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.charons[gateway]
}

// routeMTU is the MTU of the tunnel plan p routes dst into (its first
// tunnel's when no route holds dst).
func routeMTU(p plan.Gateway, dst netip.Addr) int {
	for _, r := range p.Routes {
		if r.Destination.Contains(dst) {
			for _, t := range p.Tunnels {
				if t.Name == r.Device {
					return t.MTU
				}
			}
		}
	}
	return p.Tunnels[0].MTU
}
