package lab

import (
	"context"
	"fmt"

	"github.com/vishvananda/netlink"
)

// SetInternet cuts (up false) or restores (up true) the internet link of
// every gateway of site: it sets the internet side of the gateway's public
// veth (the port on the internet bridge, named after the gateway in its
// alias) down or up. The gateway's own pub0 keeps its address and routes;
// it just loses its carrier, as when a site's uplink fails. Only the lab's
// internet namespace is touched. It is idempotent.
func (l *Lab) SetInternet(ctx context.Context, site string, up bool) error {
	gws := l.SiteGateways(site)
	if len(gws) == 0 {
		return fmt.Errorf("lab %s has no site %q (sites: %v)", l.Name, site, l.Sites())
	}
	return l.Internet.Do(func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return fmt.Errorf("listing the internet's links: %w", err)
		}
		for _, gw := range gws {
			if err := ctx.Err(); err != nil {
				return err
			}
			var port netlink.Link
			for _, link := range links {
				if link.Attrs().Alias == gw.Name && link.Type() == "veth" {
					port = link
				}
			}
			if port == nil {
				return fmt.Errorf("gateway %s has no port on the internet bridge", gw.Name)
			}
			set, what := netlink.LinkSetDown, "down"
			if up {
				set, what = netlink.LinkSetUp, "up"
			}
			if err := set(port); err != nil {
				return fmt.Errorf("setting %s's internet port %s %s: %w", gw.Name, port.Attrs().Name, what, err)
			}
		}
		return nil
	})
}
