//go:build linux

package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// SetCables unplugs (up false) or plugs back (up true) every cable of node
// n: its ports on the internet bridge and on every switch of the lab
// (found by the port alias, the node's name) go down or up. The node's own
// interfaces keep their addresses and routes; they lose their carrier. It
// is idempotent and touches only the internet and switch namespaces.
func (l *Lab) SetCables(ctx context.Context, n *Node, up bool) error {
	on := []*Node{l.Internet}
	for _, sw := range l.nodes {
		if sw.Role == RoleSwitch {
			on = append(on, sw)
		}
	}
	found, err := setPorts(ctx, n, up, on)
	if err == nil && found == 0 {
		err = fmt.Errorf("%s %s has no port on the lab's bridges", n.Role, n.Name)
	}
	return err
}

// SetUplink unplugs (up false) or plugs back (up true) gateway gw's
// internet link only: its port on the internet bridge goes down or up, its
// LAN stays up (compare SetInternet, which cuts every gateway of a site).
// It is idempotent.
func (l *Lab) SetUplink(ctx context.Context, gw *Node, up bool) error {
	if gw == nil || gw.Role != RoleGateway {
		return fmt.Errorf("uplink: %v is not a gateway of lab %s", gw, l.Name)
	}
	found, err := setPorts(ctx, gw, up, []*Node{l.Internet})
	if err == nil && found == 0 {
		err = fmt.Errorf("gateway %s has no port on the internet bridge", gw.Name)
	}
	return err
}

// setPorts sets the ports of node n on the bridges of the nodes on up or
// down and returns how many it found.
func setPorts(ctx context.Context, n *Node, up bool, on []*Node) (int, error) {
	found := 0
	for _, sw := range on {
		if err := ctx.Err(); err != nil {
			return found, err
		}
		h, err := openNS(sw.Namespace)
		if err != nil {
			return found, err
		}
		links, err := h.nl.LinkList()
		if err != nil {
			h.close()
			return found, fmt.Errorf("%s: listing links: %w", sw.Name, err)
		}
		for _, link := range links {
			if link.Attrs().Alias != n.Name || link.Type() != "veth" {
				continue
			}
			found++
			set, what := h.nl.LinkSetDown, "down"
			if up {
				set, what = h.nl.LinkSetUp, "up"
			}
			if err := set(link); err != nil {
				h.close()
				return found, fmt.Errorf("setting %s's port %s on %s %s: %w", n.Name, link.Attrs().Name, sw.Name, what, err)
			}
		}
		h.close()
	}
	return found, nil
}

// Processes lists the processes running in the node's network namespace
// (whoever started them), sorted by PID.
func (n *Node) Processes() ([]ProcessInfo, error) {
	ids := nsIDs([]string{n.Namespace})
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s: namespace %s does not exist", n.Name, n.Namespace)
	}
	byNS, err := pidsIn(ids)
	if err != nil {
		return nil, err
	}
	pids := byNS[n.Namespace]
	slices.Sort(pids)
	var out []ProcessInfo
	for _, pid := range pids {
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil {
			continue // exited meanwhile
		}
		out = append(out, ProcessInfo{PID: pid, Command: strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))})
	}
	return out, nil
}

// Kill sends SIGKILL to the processes of the node that match (all of them
// when match is nil) and waits until they are gone (at most StopTimeout).
// It returns what it killed. Processes the lab started (Start) see their
// Done channel close; their parents reap the others.
func (n *Node) Kill(ctx context.Context, match func(ProcessInfo) bool) ([]ProcessInfo, error) {
	procs, err := n.Processes()
	if err != nil {
		return nil, err
	}
	var killed []ProcessInfo
	for _, p := range procs {
		if match != nil && !match(p) {
			continue
		}
		if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return killed, fmt.Errorf("%s: killing %d (%s): %w", n.Name, p.PID, p.Command, err)
		}
		killed = append(killed, p)
	}
	deadline := time.Now().Add(StopTimeout)
	for _, p := range killed {
		for running(p.PID) {
			if time.Now().After(deadline) || ctx.Err() != nil {
				return killed, fmt.Errorf("%s: process %d (%s) still runs after SIGKILL", n.Name, p.PID, p.Command)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return killed, nil
}

// KillAll sends SIGKILL to every process in the node's namespace, as a
// machine that loses power ends them, and waits until they are gone.
func (n *Node) KillAll(ctx context.Context) ([]ProcessInfo, error) { return n.Kill(ctx, nil) }

// Block drops (blocked true) or lets through again (false) every packet
// node from sends to node to's public address, in the internet's router:
// one direction of the link between two gateways (or a gateway and the
// manager). Block(a, b) and Block(b, a) cut the link both ways. It is
// idempotent and touches only the internet namespace.
func (l *Lab) Block(ctx context.Context, from, to *Node, blocked bool) error {
	if !from.Public.IsValid() || !to.Public.IsValid() {
		return fmt.Errorf("block %s -> %s: both need a public address (gateways, the manager)", from, to)
	}
	src, dst := from.Public.Addr().As4(), to.Public.Addr().As4()
	return editFaultRule(ctx, l.Internet, nftables.TableFamilyIPv4, faultKey("block", from, to), blocked, []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: src[:]},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: dst[:]},
		&expr.Counter{},
		&expr.Verdict{Kind: expr.VerdictDrop},
	})
}

// Separate drops (separated true) or forwards again (false) every frame
// between nodes a and b in each switch where both have a port (for two
// gateways of a site: the site's segment, and bridged segments they share),
// in both directions. Every other port still reaches both. It fails when
// the two share no switch.
func (l *Lab) Separate(ctx context.Context, a, b *Node, separated bool) error {
	shared := 0
	for _, sw := range l.nodes {
		if sw.Role != RoleSwitch {
			continue
		}
		pa, pb, err := portsOf(sw, a, b)
		if err != nil {
			return err
		}
		if pa == "" || pb == "" {
			continue
		}
		shared++
		for _, dir := range [][2]string{{pa, pb}, {pb, pa}} {
			key := faultKey("separate", a, b)
			key = append(key, []byte(" "+dir[0]+">"+dir[1])...)
			err := editFaultRule(ctx, sw, nftables.TableFamilyBridge, key, separated, []expr.Any{
				&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(dir[0])},
				&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(dir[1])},
				&expr.Counter{},
				&expr.Verdict{Kind: expr.VerdictDrop},
			})
			if err != nil {
				return err
			}
		}
	}
	if shared == 0 {
		return fmt.Errorf("separate: %s and %s share no switch", a, b)
	}
	return nil
}

// portsOf returns the names of the ports of a and b on switch sw ("" for
// none).
func portsOf(sw, a, b *Node) (pa, pb string, err error) {
	h, err := openNS(sw.Namespace)
	if err != nil {
		return "", "", err
	}
	defer h.close()
	links, err := h.nl.LinkList()
	if err != nil {
		return "", "", fmt.Errorf("%s: listing links: %w", sw.Name, err)
	}
	for _, link := range links {
		switch link.Attrs().Alias {
		case a.Name:
			pa = link.Attrs().Name
		case b.Name:
			pb = link.Attrs().Name
		}
	}
	return pa, pb, nil
}

// editFaultRule adds (add true) or deletes the rule whose user data is key
// to the forward chain of the faults table of family fam in node n,
// creating table and chain on first use. Adding a rule that exists, or
// deleting one that does not, changes nothing.
func editFaultRule(ctx context.Context, n *Node, fam nftables.TableFamily, key []byte, add bool, exprs []expr.Any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h, err := openNS(n.Namespace)
	if err != nil {
		return err
	}
	defer h.close()
	c, err := nftables.New(nftables.WithNetNSFd(int(h.ns)))
	if err != nil {
		return fmt.Errorf("%s: nftables: %w", n.Name, err)
	}
	t := &nftables.Table{Family: fam, Name: faultTable}
	ch := forwardChain(t)
	rules, err := c.GetRules(t, ch)
	if err != nil {
		rules = nil // no table yet
	}
	var have []*nftables.Rule
	for _, r := range rules {
		if bytes.Equal(r.UserData, key) {
			have = append(have, r)
		}
	}
	switch {
	case add && len(have) == 0:
		c.AddTable(t)
		c.AddChain(ch)
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs, UserData: key})
	case !add:
		for _, r := range have {
			if err := c.DelRule(&nftables.Rule{Table: t, Chain: ch, Handle: r.Handle}); err != nil {
				return fmt.Errorf("%s: %w", n.Name, err)
			}
		}
	}
	if err := c.Flush(); err != nil {
		verb := "adding"
		if !add {
			verb = "deleting"
		}
		return fmt.Errorf("%s: %s fault rule %q: %w", n.Name, verb, key, err)
	}
	return nil
}

// HoldVirtualAddress adds the virtual address of gw's site to gw's LAN
// interface, as the site's active gateway holds it. It stands in, in tests
// and the fault suite, for the agents' own handling of the address; it is
// idempotent and sends no gratuitous ARP (hosts that cached another MAC
// for the address keep it until their neighbor entry expires).
func (l *Lab) HoldVirtualAddress(ctx context.Context, gw *Node) error {
	vip, err := l.virtualAddress(gw)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return onLink(gw, LANInterface, func(h *nsHandle, link netlink.Link) error {
		a := &netlink.Addr{IPNet: &net.IPNet{IP: vip.Addr().AsSlice(), Mask: net.CIDRMask(vip.Bits(), 32)}}
		if err := h.nl.AddrAdd(link, a); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%s: adding virtual address %s: %w", gw.Name, vip, err)
		}
		return nil
	})
}

// VirtualAddressHolders returns the gateways of site that have the site's
// virtual address on their LAN interface, in spec order: normally one, the
// active gateway; none before the agents (or HoldVirtualAddress) add it.
func (l *Lab) VirtualAddressHolders(ctx context.Context, site string) ([]*Node, error) {
	var out []*Node
	for _, gw := range l.SiteGateways(site) {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		vip, err := l.virtualAddress(gw)
		if err != nil {
			return nil, err
		}
		held := false
		err = onLink(gw, LANInterface, func(h *nsHandle, link netlink.Link) error {
			addrs, err := h.nl.AddrList(link, netlink.FAMILY_V4)
			if err != nil {
				return fmt.Errorf("%s: listing addresses: %w", gw.Name, err)
			}
			for _, a := range addrs {
				held = held || a.IP.Equal(vip.Addr().AsSlice())
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if held {
			out = append(out, gw)
		}
	}
	return out, nil
}
