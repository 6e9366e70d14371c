package lab

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
)

// SetUDPBlocked makes the lab's internet drop (blocked true) or forward
// again (false) every UDP packet from or to the public addresses of
// site's gateways, as a network that lets only TCP through does; TCP,
// ICMP and the rest pass. It is an nftables table in the internet
// namespace only, and idempotent.
func (l *Lab) SetUDPBlocked(ctx context.Context, site string, blocked bool) error {
	gws := l.SiteGateways(site)
	if len(gws) == 0 {
		return fmt.Errorf("lab %s has no site %q (sites: %v)", l.Name, site, l.Sites())
	}
	var addrs []netip.Addr
	for _, gw := range gws {
		addrs = append(addrs, gw.Public.Addr())
	}
	cmd := l.Internet.Command(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(blockUDPRules(blockTable(site), addrs, blocked))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("setting UDP of site %s blocked=%v in the lab's internet: %w: %s", site, blocked, err, tail(string(out), 1000))
	}
	return nil
}
