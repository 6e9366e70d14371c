// Package abwlab runs available-bandwidth estimates (package abw) between
// the gateways of a lab (package lab): `fednet probe bandwidth --lab` and
// the estimator's lab tests and accuracy runs (`make bench-abw`). It lives
// apart from abw so that the agent, which links abw for its responder and
// its on-demand estimates, never links the lab, its packet capture and its
// namespace code; architecture_test.go enforces that.
package abwlab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/fednet/fednet/internal/abw"
	"github.com/fednet/fednet/internal/lab"
)

// Estimate estimates the available bandwidth from gateway from to gateway
// to of a lab whose federation runs (the probes cross the tunnel between the
// gateways' transit addresses). The sender runs in this process inside
// from's namespace; the receiver is the agent's responder on to, or, when
// no agent listens there, a Responder this process runs in to's namespace
// for the duration.
func Estimate(ctx context.Context, l *lab.Lab, from, to string, cfg abw.Config) (abw.Result, error) {
	gf, gt, err := labGateways(l, from, to)
	if err != nil {
		return abw.Result{}, err
	}
	src, err := TransitAddr(l, gf)
	if err != nil {
		return abw.Result{}, err
	}
	dst, err := TransitAddr(l, gt)
	if err != nil {
		return abw.Result{}, err
	}
	var rconn *net.UDPConn
	err = gt.Do(func() (err error) { rconn, err = abw.Listen(dst); return err })
	switch {
	case errors.Is(err, syscall.EADDRINUSE): // the agent answers
	case err != nil:
		return abw.Result{}, err
	default:
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- abw.NewResponder().Serve(rctx, rconn) }()
		defer func() { cancel(); <-done }()
	}
	var conn *net.UDPConn
	if err := gf.Do(func() (err error) {
		conn, err = net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, abw.Port)))
		return err
	}); err != nil {
		return abw.Result{}, fmt.Errorf("available-bandwidth sender on %s: %w", from, err)
	}
	defer conn.Close()
	return abw.Estimate(ctx, conn, cfg)
}

func labGateways(l *lab.Lab, from, to string) (*lab.Node, *lab.Node, error) {
	gf, gt := l.Gateway(from), l.Gateway(to)
	switch {
	case gf == nil:
		return nil, nil, fmt.Errorf("--from: no gateway %q in lab %q", from, l.Name)
	case gt == nil:
		return nil, nil, fmt.Errorf("--to: no gateway %q in lab %q", to, l.Name)
	case gf == gt:
		return nil, nil, fmt.Errorf("--from and --to name the same gateway %q; name two gateways", from)
	}
	return gf, gt, nil
}

// TransitAddr returns the transit address of a lab gateway: the IPv4
// address of its tunnel interface, which exists once its agent applied a
// plan. It waits up to 10 s for it.
func TransitAddr(l *lab.Lab, g *lab.Node) (netip.Addr, error) {
	ifname := l.Federation.Overlay.Interface
	deadline := time.Now().Add(10 * time.Second)
	for {
		var addr netip.Addr
		err := g.Do(func() error {
			ifi, err := net.InterfaceByName(ifname)
			if err != nil {
				return err
			}
			addrs, err := ifi.Addrs()
			if err != nil {
				return err
			}
			for _, a := range addrs {
				if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
					addr = p.Addr()
					return nil
				}
			}
			return fmt.Errorf("no IPv4 address on %s", ifname)
		})
		if err == nil {
			return addr, nil
		}
		if time.Now().After(deadline) {
			return netip.Addr{}, fmt.Errorf("gateway %s has no transit address on %s (is the federation running? `fednet lab up --federate`): %w", g.Name, ifname, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
