package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/spec"
)

// String renders the plan for humans; `fednet plan` and the golden tests use
// this same rendering.
func (g Gateway) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "gateway %s (site %s, federation %s)\n", g.Name, g.Site, g.Federation)
	for _, t := range g.Tunnels {
		fmt.Fprintf(&b, "  interface %s (%s) address %s listen-port %d mtu %d", t.Name, t.Backend, t.Address, t.ListenPort, t.MTU)
		if t.FallbackPort != 0 {
			fmt.Fprintf(&b, " fallback tcp/%d", t.FallbackPort)
		}
		b.WriteString("\n")
		fmt.Fprintf(&b, "    mtu: %s\n", t.MTUReason)
	}
	for _, p := range g.Peers {
		fmt.Fprintf(&b, "  peer %s (site %s)\n", p.Gateway, p.Site)
		if p.Backend == backend.WireGuard {
			key := p.WireGuard.PublicKey.String()
			if key == "" {
				key = "(not known yet: peer skipped until the gateway has a key)"
			}
			fmt.Fprintf(&b, "    public-key %s\n", key)
		} else {
			fmt.Fprintf(&b, "    backend %s\n", p.Backend)
		}
		ep := p.Endpoint
		if ep == "" {
			ep = "(behind NAT: it connects to us)"
		}
		fmt.Fprintf(&b, "    endpoint %s\n", ep)
		fmt.Fprintf(&b, "    allowed-ips %s\n", joinPrefixes(p.AllowedIPs))
		if k := p.WireGuard.PersistentKeepalive; k > 0 {
			fmt.Fprintf(&b, "    persistent-keepalive %d\n", k)
		}
		if ip := p.IPsec; ip != nil && ip.Profile != "" {
			fmt.Fprintf(&b, "    external site, profile %s: ikev%d ike %s esp %s lifetimes %ds/%ds dpd %ds psk %s\n",
				ip.Profile, max(ip.IKEVersion, 1), strings.Join(ip.IKE, ","), strings.Join(ip.ESP, ","), ip.IKERekeySeconds, ip.RekeySeconds, ip.DPDSeconds, ip.PSKFile)
			for _, c := range ip.Children {
				fmt.Fprintf(&b, "    child-sa %s <-> %s\n", joinPrefixes(c.LocalTS), joinPrefixes(c.RemoteTS))
			}
		}
	}
	for _, r := range g.Routes {
		fmt.Fprintf(&b, "  route %s dev %s via-peer %s\n", r.Destination, r.Device, r.Via)
	}
	for _, br := range g.Bridges {
		port := br.Port
		if port == "" {
			port = "(none)"
		}
		role := ""
		if br.Relay {
			role = ", relay only"
		}
		fmt.Fprintf(&b, "  bridge %s (network %s, vni %d%s) port %s mtu %d\n", br.Name, br.Network, br.VNI, role, port, br.MTU)
		if br.MTUReason != "" {
			fmt.Fprintf(&b, "    mtu: %s\n", br.MTUReason)
		}
		for _, v := range br.VXLANs {
			if v.Kind != ToGateways {
				continue
			}
			remotes := make([]string, len(v.Remotes))
			for i, a := range v.Remotes {
				remotes[i] = a.String()
			}
			flood := strings.Join(remotes, ", ")
			if flood == "" {
				flood = "(no other member)"
			}
			fmt.Fprintf(&b, "    vxlan %s port %d to %s flood-to %s\n", v.Name, v.UDPPort, v.To, flood)
		}
		for _, v := range br.VXLANs {
			if v.Kind == ToHost {
				fmt.Fprintf(&b, "    neighbor %s vxlan %s local %s remote %s udp %d\n", v.To, v.Name, v.Local, joinAddrs(v.Remotes), v.UDPPort)
			}
		}
	}
	onOff := map[bool]string{true: "on", false: "off"}
	fmt.Fprintf(&b, "  forwarding %s\n", onOff[g.Forwarding])
	fw := g.Firewall
	fmt.Fprintf(&b, "  firewall table inet %s\n", fw.Table)
	tunnels := strings.Join(fw.Tunnels, ", ")
	var public []string
	for _, p := range fw.Public {
		if p.Port == 0 {
			public = append(public, p.Protocol.String())
		} else {
			public = append(public, fmt.Sprintf("%s dport %d", p.Protocol, p.Port))
		}
	}
	fmt.Fprintf(&b, "    input: accept %s, established, from local %s, from transit %s on %s; drop the rest\n",
		strings.Join(public, ", "), joinPrefixes(fw.Local), fw.Transit, tunnels)
	if len(fw.TunnelPorts) > 0 {
		ports := make([]string, len(fw.TunnelPorts))
		for i, p := range fw.TunnelPorts {
			ports[i] = strconv.Itoa(p)
		}
		fmt.Fprintf(&b, "    input: drop udp dport %s (VXLAN) unless it comes through %s\n", strings.Join(ports, ", "), tunnels)
	}
	for _, n := range fw.Neighbors {
		fmt.Fprintf(&b, "    input: accept udp dport %d from neighbor %s only\n", n.Port, n.Address)
	}
	for _, a := range fw.Admit {
		fmt.Fprintf(&b, "    input: accept %s dport %d from %s (publicAllow)\n", a.Protocol, a.Port, joinPrefixes(a.Sources))
	}
	for _, fl := range fw.Flows {
		fmt.Fprintf(&b, "    forward: accept %s -> %s (network %s)\n", fl.Source, fl.Destination, fl.Network)
	}
	fmt.Fprintf(&b, "    forward: drop the rest in or out of %s\n", tunnels)
	if len(fw.Remote) > 0 {
		fmt.Fprintf(&b, "    forward: drop other sites' prefixes %s unless they leave by %s\n", joinPrefixes(fw.Remote), tunnels)
	}
	fmt.Fprintf(&b, "    tcp mss clamp %d on %s\n", fw.MSS, tunnels)
	if l := g.LAN; l.Address.IsValid() {
		role := "standby: the site's virtual address is on its active gateway"
		if l.Active {
			role = "active: holds the site's virtual address"
		}
		if l.Virtual == l.Address {
			role = "the site's only gateway"
		}
		fmt.Fprintf(&b, "  lan address %s virtual %s (%s)\n", l.Address, l.Virtual, role)
	}
	if bd := g.Bounds; bd.Supernet.IsValid() {
		ports := "(none)"
		if len(bd.Ports) > 0 {
			ports = strings.Join(bd.Ports, ", ")
		}
		fmt.Fprintf(&b, "  bounds: routes and peers inside %s and %s; bridge ports %s\n", bd.Supernet, bd.Transit, ports)
	}
	return b.String()
}

// JSON renders the plan as indented JSON, the format `fednet agent --plan`
// reads.
func (g Gateway) JSON() []byte {
	b, err := json.MarshalIndent(g, "", "  ")
	if err != nil {
		// Plans hold only plain values; marshalling cannot fail.
		panic(fmt.Sprintf("marshalling plan: %v", err))
	}
	return append(b, '\n')
}

// Decode reads a plan written by JSON, rejecting unknown fields and plans
// of a format version this fednet does not know: a newer one (the error
// says to upgrade fednet, and the caller keeps its current state) or the
// first one, which had no version field (the error says to make the plan
// again).
func Decode(data []byte) (Gateway, error) {
	// One pass when the plan is of this format (the common case: an agent
	// decodes a plan of a thousand peers at every change); the version is
	// looked at first only to explain a failure.
	// The alias has Gateway's fields but not its UnmarshalJSON.
	type fields Gateway
	var g fields
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(&g)
	if err != nil || g.Version != Version {
		if verr := checkVersion(data); verr != nil {
			return Gateway{}, verr
		}
	}
	if err != nil {
		return Gateway{}, fmt.Errorf("decoding plan: %w", err)
	}
	if g.Name == "" || len(g.Tunnels) == 0 {
		return Gateway{}, fmt.Errorf("decoding plan: missing gateway or tunnels; is this the output of `fednet plan -o json --gateway NAME`?")
	}
	return Gateway(g), nil
}

// checkVersion returns why the plan data cannot be read for its format
// version, or nil when it is of this fednet's.
func checkVersion(data []byte) error {
	var v struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("decoding plan: %w", err)
	}
	switch {
	case v.Version == nil:
		return fmt.Errorf("decoding plan: it has no version field, so it is of format 1, written by an older fednet; this fednet reads format %d: make the plan again (fednet plan -o json --gateway NAME)", Version)
	case *v.Version > Version:
		return fmt.Errorf("decoding plan: it is of format %d, newer than the %d this fednet understands; upgrade fednet on this gateway (the current state stays as it is)", *v.Version, Version)
	case *v.Version < Version:
		return fmt.Errorf("decoding plan: format %d is older than the %d this fednet reads; make the plan again (fednet plan -o json --gateway NAME)", *v.Version, Version)
	}
	return nil
}

// UnmarshalJSON decodes a plan as Decode does, so a plan inside any JSON
// document (the manager's plan answers) is held to the same rules: no
// unknown field, no unknown format version.
func (g *Gateway) UnmarshalJSON(data []byte) error {
	d, err := Decode(data)
	if err != nil {
		return err
	}
	*g = d
	return nil
}

// AddressPlan renders the federation's address plan: one row per site
// prefix and gateway.
func AddressPlan(f *spec.Federation) string {
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "SITE\tPROVIDER\tREGION\tPREFIX\tGATEWAY\tLAN ADDRESS\tTRANSIT\tENDPOINT")
	for _, s := range f.Sites {
		for i, g := range s.Gateways {
			pfx := joinPrefixes(sortedPrefixes(s.Prefixes))
			if i > 0 {
				pfx = ""
			}
			ep := g.Endpoint
			if g.BehindNAT {
				ep = "(behind NAT)"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Provider, dash(s.Region), pfx, g.Name, g.LANAddress, g.TransitAddress, ep)
		}
		if x := s.External; x != nil {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Provider, dash(s.Region), joinPrefixes(sortedPrefixes(s.Prefixes)),
				"(external "+string(x.Profile)+", via "+x.Via+")", "-", "-", x.Endpoint)
		}
	}
	w.Flush()
	return b.String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}
