package spec

import (
	"fmt"
	"net/netip"
)

// Admission admits traffic to a gateway itself on its public side, where
// the gateway's firewall otherwise accepts only the tunnel: typically SSH
// (tcp 22) from the operators' network, so that the first apply does not
// cut the session that started the agent. Sources are required: to admit
// everyone, say so with 0.0.0.0/0 (and ::/0).
type Admission struct {
	// Protocol is tcp or udp.
	Protocol string `yaml:"protocol" json:"protocol"`
	// Port is the destination port on the gateway, 1..65535.
	Port int `yaml:"port" json:"port"`
	// Sources are the prefixes admitted; at least one.
	Sources []netip.Prefix `yaml:"sources" json:"sources"`
}

// Protocols an Admission may name.
const (
	AdmitTCP = "tcp"
	AdmitUDP = "udp"
)

// PublicAllowOf returns what gateway g admits on its public side: the
// federation's overlay.publicAllow, then the gateway's own publicAllow.
func (f *Federation) PublicAllowOf(g *Gateway) []Admission {
	out := append([]Admission{}, f.Overlay.PublicAllow...)
	return append(out, g.PublicAllow...)
}

// publicAllows checks overlay.publicAllow and every gateway's publicAllow.
func (c *checker) publicAllows() {
	c.admissions("overlay.publicAllow", c.f.Overlay.PublicAllow)
	for i := range c.f.Sites {
		for j := range c.f.Sites[i].Gateways {
			c.admissions(fmt.Sprintf("sites[%d].gateways[%d].publicAllow", i, j), c.f.Sites[i].Gateways[j].PublicAllow)
		}
	}
}

const admissionExample = "{protocol: tcp, port: 22, sources: [203.0.113.0/24]}"

func (c *checker) admissions(path string, list []Admission) {
	if c.ps.isBad(path) {
		return
	}
	for k, a := range list {
		p := fmt.Sprintf("%s[%d]", path, k)
		if c.ps.isBad(p) {
			continue
		}
		switch a.Protocol {
		case AdmitTCP, AdmitUDP:
		case "":
			c.add(p+".protocol", "protocol is missing; want tcp or udp, like %s", admissionExample)
		default:
			c.add(p+".protocol", "%q is not a protocol fednet admits; want tcp or udp", a.Protocol)
		}
		switch {
		case !c.set[p+".port"]:
			c.add(p+".port", "port is missing; want the port on the gateway, 1..65535, like %s", admissionExample)
		case a.Port < 1 || a.Port > 65535:
			c.add(p+".port", "%d is not a port; want 1..65535", a.Port)
		case a.Protocol == AdmitUDP && a.Port == c.f.Overlay.ListenPort:
			c.add(p+".port", "udp %d is overlay.listenPort, which the gateway admits from everyone already for the tunnel; leave this entry out", a.Port)
		}
		if len(a.Sources) == 0 && !c.ps.isBad(p+".sources") {
			c.add(p+".sources", "sources is missing or empty; want the prefixes to admit, like [203.0.113.0/24] (0.0.0.0/0 and ::/0 admit everyone: say so only if you mean it)")
		}
		seen := map[netip.Prefix]int{}
		for n, s := range a.Sources {
			if !s.IsValid() {
				continue
			}
			if m, dup := seen[s]; dup {
				c.add(fmt.Sprintf("%s.sources[%d]", p, n), "%s is listed twice (also sources[%d]); list each prefix once", s, m)
				continue
			}
			seen[s] = n
		}
	}
}
