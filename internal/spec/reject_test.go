package spec

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// base is a valid spec; rejection cases edit it. Its lines:
//
//	 1 apiVersion: fednet/v1
//	 2 kind: Federation
//	 3 name: t
//	 4 sites:
//	 5   - name: a
//	 6     provider: aws
//	 7     gateways:
//	 8       - name: a-gw
//	 9         endpoint: 198.51.100.1:51820
//	10   - name: b
//	11     provider: azure
//	12     gateways:
//	13       - name: b-gw
//	14         endpoint: 198.51.100.2:51820
//	15 networks:
//	16   - name: n
//	17     id: 1
//	18     mode: routed
//	19     sites: [a, b]
const base = `apiVersion: fednet/v1
kind: Federation
name: t
sites:
  - name: a
    provider: aws
    gateways:
      - name: a-gw
        endpoint: 198.51.100.1:51820
  - name: b
    provider: azure
    gateways:
      - name: b-gw
        endpoint: 198.51.100.2:51820
networks:
  - name: n
    id: 1
    mode: routed
    sites: [a, b]
`

// siteC is a third site, one line long, to insert before "networks:".
const siteC = "  - {name: c, provider: gcp, gateways: [{name: c-gw, endpoint: \"198.51.100.3:51820\"}]}\n"

// edit returns base with each old replaced by the following new. Every old
// must occur in base exactly once.
func edit(t *testing.T, pairs ...string) string {
	t.Helper()
	s := base
	for i := 0; i+1 < len(pairs); i += 2 {
		if n := strings.Count(s, pairs[i]); n != 1 {
			t.Fatalf("edit: %q occurs %d times, want once", pairs[i], n)
		}
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	return s
}

// bridged returns base with bridgePorts portsA and portsB (flow mappings;
// "" for none) on a-gw and b-gw and a bridged network lan (id 2) whose
// fields after mode are rest. Its lines: a-gw's bridgePorts 10, b-gw 14 and
// its bridgePorts 16, networks[0] 18, lan 22.
func bridged(t *testing.T, portsA, portsB, rest string) string {
	t.Helper()
	ports := func(p string) string {
		if p == "" {
			return ""
		}
		return "        bridgePorts: " + p + "\n"
	}
	return edit(t,
		"endpoint: 198.51.100.1:51820\n", "endpoint: 198.51.100.1:51820\n"+ports(portsA),
		"endpoint: 198.51.100.2:51820\n", "endpoint: 198.51.100.2:51820\n"+ports(portsB)) +
		"  - {name: lan, id: 2, mode: bridged, " + rest + "}\n"
}

func TestBridgedIsValid(t *testing.T) {
	f, err := Parse([]byte(bridged(t, "{lan: eth1}", "{lan: b1}", "sites: [a, b], subnet: 192.168.50.0/24")))
	if err != nil {
		t.Fatalf("bridged spec rejected:\n%v", err)
	}
	n := f.Networks[1]
	if n.Mode != Bridged || n.Subnet.String() != "192.168.50.0/24" {
		t.Errorf("network lan = %+v, want bridged with subnet 192.168.50.0/24", n)
	}
	if p := f.Sites[1].Gateways[0].BridgePorts["lan"]; p != "b1" {
		t.Errorf("b-gw's port for lan = %q, want b1", p)
	}
	if got := f.Line("sites[1].gateways[0].bridgePorts.lan"); got != 16 {
		t.Errorf("line of b-gw's port = %d, want 16", got)
	}
}

// A site whose fabric drops unknown MACs needs no bridge port: its hosts
// join through neighbor tunnels.
func TestDropsUnknownMACsNeedsNoPort(t *testing.T) {
	y := strings.Replace(bridged(t, "", "{lan: b1}", "sites: [a, b]"), "    provider: aws\n", "    provider: aws\n    fabric: dropsUnknownMACs\n", 1)
	f, err := Parse([]byte(y))
	if err != nil {
		t.Fatalf("spec rejected:\n%v", err)
	}
	if !f.Sites[0].DropsUnknownMACs() || f.Sites[1].DropsUnknownMACs() {
		t.Errorf("DropsUnknownMACs = %v, %v; want true, false", f.Sites[0].DropsUnknownMACs(), f.Sites[1].DropsUnknownMACs())
	}
}

func TestBaseIsValid(t *testing.T) {
	if _, err := Parse([]byte(base)); err != nil {
		t.Fatalf("base spec rejected:\n%v", err)
	}
}

func TestRejections(t *testing.T) {
	tests := []struct {
		name string
		// spec returns the YAML to parse.
		spec func(t *testing.T) string
		path string
		line int
		// msg must appear in the problem's message.
		msg string
		// more allows other problems besides the expected one; by default
		// the expected problem must be the only one.
		more bool
	}{
		// Document.
		{"apiVersion wrong", func(t *testing.T) string { return edit(t, "fednet/v1", "fednet/v2") },
			"apiVersion", 1, "want fednet/v1", false},
		{"apiVersion missing", func(t *testing.T) string { return edit(t, "apiVersion: fednet/v1\n", "") },
			"apiVersion", 1, "apiVersion is missing", false},
		{"kind wrong", func(t *testing.T) string { return edit(t, "kind: Federation", "kind: Network") },
			"kind", 2, "want Federation", false},
		{"kind missing", func(t *testing.T) string { return edit(t, "kind: Federation\n", "") },
			"kind", 1, "kind is missing", false},
		{"name missing", func(t *testing.T) string { return edit(t, "name: t\n", "") },
			"name", 1, "has no name", false},
		{"name invalid", func(t *testing.T) string { return edit(t, "name: t\n", "name: My_Fed\n") },
			"name", 3, "lowercase letters, digits and '-'", false},

		// Fabric.
		{"fabric unknown", func(t *testing.T) string {
			return edit(t, "    provider: aws\n", "    provider: aws\n    fabric: dropUnknownMACs\n")
		},
			"sites[0].fabric", 7, "want fabric: dropsUnknownMACs", false},

		// Unknown fields, anywhere.
		{"unknown top-level field", func(t *testing.T) string { return base + "colour: red\n" },
			"colour", 20, "valid fields here: apiVersion, kind, name, overlay, providers, sites, networks, topology, egressPrices, lab", false},
		{"unknown site field", func(t *testing.T) string {
			return edit(t, "    provider: aws\n", "    provider: aws\n    regoin: eu\n")
		},
			"sites[0].regoin", 7, "did you mean region?", false},
		{"unknown gateway field", func(t *testing.T) string {
			return edit(t, "endpoint: 198.51.100.1:51820\n", "endpoint: 198.51.100.1:51820\n        port: 1\n")
		}, "sites[0].gateways[0].port", 10, "valid fields here: name, endpoint, behindNAT, publicKey, transitAddress, lanAddress, bridgePorts", false},
		{"unknown network field", func(t *testing.T) string { return edit(t, "    mode: routed\n", "    mode: routed\n    vni: 5\n") },
			"networks[0].vni", 19, "valid fields here: name, id, mode, sites, subnet", false},
		{"unknown overlay field", func(t *testing.T) string { return base + "overlay:\n  mtu: 1400\n" },
			"overlay.mtu", 21, "valid fields here: supernet, transit, listenPort, underlayMTU, interface", false},
		{"unknown link field", func(t *testing.T) string {
			return base + "topology:\n  links:\n    - between: [a, b]\n      weight: 3\n"
		}, "topology.links[0].weight", 23, "valid fields here: between, disabled, cost", false},
		{"unknown lab field", func(t *testing.T) string { return base + "lab:\n  hosts: 3\n" },
			"lab.hosts", 21, "valid fields here: hostsPerSite, publicAddresses", false},
		{"duplicate key", func(t *testing.T) string { return edit(t, "name: t\n", "name: t\nname: u\n") },
			"name", 4, "given twice (first on line 3)", false},
		{"merge key", func(t *testing.T) string { return edit(t, "    mode: routed\n", "    mode: routed\n    <<: {x: 1}\n") },
			"networks[0].<<", 19, "merge keys", false},

		// Wrong YAML types.
		{"text for number", func(t *testing.T) string { return edit(t, "id: 1", "id: abc") },
			"networks[0].id", 17, `"abc" is not a number`, false},
		{"quoted number", func(t *testing.T) string { return edit(t, "id: 1", `id: "1"`) },
			"networks[0].id", 17, "quoted text, not a number", false},
		{"fraction for number", func(t *testing.T) string { return edit(t, "id: 1", "id: 1.5") },
			"networks[0].id", 17, "not a whole number", false},
		{"huge number", func(t *testing.T) string { return edit(t, "id: 1", "id: 99999999999999999999") },
			"networks[0].id", 17, "out of range", false},
		{"list for mapping", func(t *testing.T) string { return base + "overlay: [1, 2]\n" },
			"overlay", 20, "is a list; want a mapping with fields supernet", false},
		{"mapping for text", func(t *testing.T) string { return edit(t, "name: t\n", "name: {x: 1}\n") },
			"name", 3, "is a mapping (key: value); want text", false},
		{"text for list", func(t *testing.T) string { return edit(t, "sites: [a, b]", "sites: a") },
			"networks[0].sites", 19, `is "a"; want a list`, false},
		{"text for bool", func(t *testing.T) string {
			return edit(t, "endpoint: 198.51.100.1:51820\n", "endpoint: 198.51.100.1:51820\n        behindNAT: maybe\n")
		}, "sites[0].gateways[0].behindNAT", 10, `"maybe" is not true or false`, false},
		{"top level is a list", func(t *testing.T) string { return "- a\n- b\n" },
			"", 1, "is a list; want a mapping with fields apiVersion", false},
		{"number for map", func(t *testing.T) string { return base + "providers: 3\n" },
			"providers", 20, "want a mapping (name: value)", false},

		// YAML itself.
		{"not YAML", func(t *testing.T) string { return "apiVersion: fednet/v1\nkind: [Federation\n" },
			"", 2, "not valid YAML: did not find expected ',' or ']'", false},
		{"not YAML, mapping", func(t *testing.T) string { return "a: 1\n- b\n" },
			"", 2, "not valid YAML: did not find expected key", false},
		{"tab indentation", func(t *testing.T) string { return "apiVersion: fednet/v1\n\tkind: Federation\n" },
			"", 2, "tab character", false},
		{"two documents", func(t *testing.T) string { return base + "---\nname: x\n" },
			"", 20, "second YAML document", false},
		{"empty", func(t *testing.T) string { return "# nothing\n" },
			"", 0, "the spec is empty", false},

		// Duplicates.
		{"duplicate site name", func(t *testing.T) string { return edit(t, "  - name: b\n", "  - name: a\n", "[a, b]", "[a]") },
			"sites[1].name", 10, `site name "a" is already used by sites[0] (line 5)`, false},
		{"duplicate gateway name", func(t *testing.T) string { return edit(t, "name: b-gw", "name: a-gw") },
			"sites[1].gateways[0].name", 13, `gateway name "a-gw" is already used by sites[0].gateways[0] (line 8)`, false},
		{"duplicate network name", func(t *testing.T) string { return base + "  - {name: n, id: 2, mode: routed, sites: [a]}\n" },
			"networks[1].name", 20, `network name "n" is already used by networks[0] (line 16)`, false},
		{"duplicate network id", func(t *testing.T) string { return base + "  - {name: m, id: 1, mode: routed, sites: [a]}\n" },
			"networks[1].id", 20, "id 1 is already used by network n", false},

		// Malformed values.
		{"malformed prefix", func(t *testing.T) string {
			return edit(t, "    provider: aws\n", "    provider: aws\n    prefixes: [10.1.0/24]\n")
		},
			"sites[0].prefixes[0]", 7, `"10.1.0/24" is not an IP prefix`, false},
		{"prefix with host bits", func(t *testing.T) string {
			return edit(t, "    provider: aws\n", "    provider: aws\n    prefixes: [10.1.0.1/24]\n")
		},
			"sites[0].prefixes[0]", 7, "want 10.1.0.0/24", false},
		{"malformed supernet", func(t *testing.T) string { return base + "overlay:\n  supernet: ten/8\n" },
			"overlay.supernet", 21, "is not an IP prefix", false},
		{"malformed address", func(t *testing.T) string {
			return edit(t, "endpoint: 198.51.100.1:51820\n", "endpoint: 198.51.100.1:51820\n        lanAddress: 10.1.0.300\n")
		}, "sites[0].gateways[0].lanAddress", 10, `"10.1.0.300" is not an IP address`, false},
		{"endpoint without port", func(t *testing.T) string { return edit(t, "198.51.100.1:51820", "1.2.3.4") },
			"sites[0].gateways[0].endpoint", 9, `"1.2.3.4" is not host:port; want e.g. 198.51.100.10:51820`, false},
		{"endpoint port 0", func(t *testing.T) string { return edit(t, "198.51.100.1:51820", "198.51.100.1:0") },
			"sites[0].gateways[0].endpoint", 9, "want a port 1..65535", false},
		{"endpoint port too big", func(t *testing.T) string { return edit(t, "198.51.100.1:51820", "198.51.100.1:65536") },
			"sites[0].gateways[0].endpoint", 9, "want a port 1..65535", false},
		{"endpoint bad host", func(t *testing.T) string { return edit(t, "198.51.100.1:51820", "gw_1.example.com:51820") },
			"sites[0].gateways[0].endpoint", 9, "neither an IP address nor a DNS name", false},
		{"endpoint truncated IPv4", func(t *testing.T) string { return edit(t, "198.51.100.1:51820", "198.51.100:51820") },
			"sites[0].gateways[0].endpoint", 9, "neither an IP address nor a DNS name", false},
		{"endpoint unspecified", func(t *testing.T) string { return edit(t, "198.51.100.1:51820", "0.0.0.0:51820") },
			"sites[0].gateways[0].endpoint", 9, "peers cannot send to", false},
		{"listenPort 0", func(t *testing.T) string { return base + "overlay:\n  listenPort: 0\n" },
			"overlay.listenPort", 21, "want 1..65535", false},
		{"listenPort too big", func(t *testing.T) string { return base + "overlay:\n  listenPort: 65536\n" },
			"overlay.listenPort", 21, "want 1..65535", false},
		{"fallback mode", func(t *testing.T) string { return base + "overlay:\n  fallback:\n    tcp443: on\n" },
			"overlay.fallback.tcp443", 22, "want auto", false},
		{"fallback port 0", func(t *testing.T) string { return base + "overlay:\n  fallback:\n    port: 0\n" },
			"overlay.fallback.port", 22, "want 1..65535", false},
		{"fallback unknown field", func(t *testing.T) string { return base + "overlay:\n  fallback:\n    udp: off\n" },
			"overlay.fallback.udp", 22, "valid fields here: tcp443, port", false},
		{"underlayMTU too small for tunnel", func(t *testing.T) string { return base + "overlay:\n  underlayMTU: 1300\n" },
			"overlay.underlayMTU", 21, "want 1360..65535", false},
		{"underlayMTU too big", func(t *testing.T) string { return base + "overlay:\n  underlayMTU: 70000\n" },
			"overlay.underlayMTU", 21, "want 1360..65535", false},
		{"interface name too long", func(t *testing.T) string { return base + "overlay:\n  interface: fednet-overlay-0\n" },
			"overlay.interface", 21, "1 to 15 letters", false},
		{"interface loopback", func(t *testing.T) string { return base + "overlay:\n  interface: lo\n" },
			"overlay.interface", 21, "never takes over an existing one", false},
		{"interface ethernet", func(t *testing.T) string { return base + "overlay:\n  interface: eth0\n" },
			"overlay.interface", 21, "never takes over an existing one", false},
		{"interface predictable ethernet", func(t *testing.T) string { return base + "overlay:\n  interface: enp0s31f6\n" },
			"overlay.interface", 21, "never takes over an existing one", false},
		{"backend unknown", func(t *testing.T) string { return base + "overlay:\n  backend: openvpn\n" },
			"overlay.backend", 21, `"openvpn" is not a tunnel backend; want one of: ipsec, wireguard`, false},
		{"publicKey not base64", func(t *testing.T) string {
			return edit(t, "endpoint: 198.51.100.1:51820\n", "endpoint: 198.51.100.1:51820\n        publicKey: not-a-key!\n")
		}, "sites[0].gateways[0].publicKey", 10, "is not base64", false},
		{"publicKey wrong length", func(t *testing.T) string {
			return edit(t, "endpoint: 198.51.100.1:51820\n", "endpoint: 198.51.100.1:51820\n        publicKey: AAAAAAAAAAAAAAAAAAAAAA==\n")
		}, "sites[0].gateways[0].publicKey", 10, "decodes to 16 bytes", false},

		// Networks.
		{"network id 0", func(t *testing.T) string { return edit(t, "id: 1", "id: 0") },
			"networks[0].id", 17, "0 is out of range; want 1..16777215", false},
		{"network id too big", func(t *testing.T) string { return edit(t, "id: 1", "id: 16777216") },
			"networks[0].id", 17, "want 1..16777215", false},
		{"network id missing", func(t *testing.T) string { return edit(t, "    id: 1\n", "") },
			"networks[0].id", 16, "has no id", false},
		{"bridged network without ports", func(t *testing.T) string { return edit(t, "mode: routed", "mode: bridged") },
			"sites[0].gateways[0].bridgePorts", 8, "site a is in bridged network n but its gateway a-gw has no port for it; add bridgePorts: {n: IFACE}", true},
		{"unknown network mode", func(t *testing.T) string { return edit(t, "mode: routed", "mode: l3") },
			"networks[0].mode", 18, `"l3" is not a network mode; want routed or bridged`, false},
		{"network mode missing", func(t *testing.T) string { return edit(t, "    mode: routed\n", "") },
			"networks[0].mode", 16, "has no mode; want mode: routed", false},
		{"network without sites", func(t *testing.T) string { return edit(t, "sites: [a, b]", "sites: []") },
			"networks[0].sites", 19, "network n has no sites", false},
		{"network with unknown site", func(t *testing.T) string { return edit(t, "sites: [a, b]", "sites: [a, c]") },
			"networks[0].sites[1]", 19, `unknown site "c"; known sites: a, b`, false},
		{"site twice in network", func(t *testing.T) string { return edit(t, "sites: [a, b]", "sites: [a, b, a]") },
			"networks[0].sites[2]", 19, "already listed in this network", false},
		{"network name invalid", func(t *testing.T) string { return edit(t, "name: n\n", "name: N\n") },
			"networks[0].name", 16, "not a valid network name", false},

		// Bridged networks (see bridged for the lines).
		{"bridged: first gateway without port", func(t *testing.T) string { return bridged(t, "", "{lan: eth1}", "sites: [a, b]") },
			"sites[0].gateways[0].bridgePorts", 8, "site a is in bridged network lan but its gateway a-gw has no port for it", false},
		{"virtual address outside the site", func(t *testing.T) string {
			return edit(t, "  - name: b\n", "    virtualAddress: 10.9.0.1\n  - name: b\n")
		}, "sites[0].virtualAddress", 10, "is not in any prefix of site a", false},
		{"virtual address of a one-gateway site", func(t *testing.T) string {
			return edit(t, "  - name: b\n", "    virtualAddress: 10.1.0.9\n  - name: b\n")
		}, "sites[0].virtualAddress", 10, "site a has one gateway, so its virtual address is that gateway's lanAddress 10.1.0.254", false},
		{"virtual address is a gateway's", func(t *testing.T) string {
			return edit(t, "  - name: b\n", "      - name: a-gw2\n        endpoint: 198.51.100.9:51820\n        lanAddress: 10.1.0.20\n    virtualAddress: 10.1.0.20\n  - name: b\n")
		}, "sites[0].virtualAddress", 13, "is also the lanAddress of gateway a-gw2", false},
		{"bridged: second gateway without port", func(t *testing.T) string {
			return strings.Replace(bridged(t, "{lan: eth1}", "{lan: eth1}", "sites: [a, b]"),
				"        bridgePorts: {lan: eth1}\n  - name: b", "        bridgePorts: {lan: eth1}\n      - name: a-gw2\n        endpoint: 198.51.100.9:51820\n  - name: b", 1)
		}, "sites[0].gateways[1].bridgePorts", 11, "its gateway a-gw2 has no port for it (every gateway of the site needs one: any of them may become active)", false},
		{"bridged: port for unknown network", func(t *testing.T) string {
			return bridged(t, "{lan: eth1, wan: eth2}", "{lan: eth1}", "sites: [a, b]")
		}, "sites[0].gateways[0].bridgePorts.wan", 10, `unknown network "wan"`, false},
		{"bridged: port for routed network", func(t *testing.T) string {
			return bridged(t, "{lan: eth1, n: eth2}", "{lan: eth1}", "sites: [a, b]")
		}, "sites[0].gateways[0].bridgePorts.n", 10, "network n is routed, not bridged: it needs no port", false},
		{"bridged: port at a site outside the network", func(t *testing.T) string { return bridged(t, "{lan: eth1}", "{lan: eth1}", "sites: [a]") },
			"sites[1].gateways[0].bridgePorts.lan", 16, "site b is not a member of network lan", false},
		{"bridged: invalid port name", func(t *testing.T) string { return bridged(t, `{lan: "eth 1"}`, "{lan: eth1}", "sites: [a, b]") },
			"sites[0].gateways[0].bridgePorts.lan", 10, `"eth 1" is not a usable interface name`, false},
		{"bridged: port name too long", func(t *testing.T) string {
			return bridged(t, "{lan: ethernet-port-10}", "{lan: eth1}", "sites: [a, b]")
		}, "sites[0].gateways[0].bridgePorts.lan", 10, "1 to 15 letters", false},
		{"bridged: port is the tunnel interface", func(t *testing.T) string { return bridged(t, "{lan: fed0}", "{lan: eth1}", "sites: [a, b]") },
			"sites[0].gateways[0].bridgePorts.lan", 10, "fed0 is the WireGuard interface (overlay.interface)", false},
		{"bridged: one port for two networks", func(t *testing.T) string {
			return bridged(t, "{lan: eth1, lan2: eth1}", "{lan: eth1, lan2: eth2}", "sites: [a, b]") +
				"  - {name: lan2, id: 3, mode: bridged, sites: [a, b]}\n"
		}, "sites[0].gateways[0].bridgePorts.lan2", 10, "eth1 is already the port of network lan on this gateway", false},
		{"bridged: members without a direct link", func(t *testing.T) string {
			return bridged(t, "{lan: eth1}", "{lan: eth1}", "sites: [a, b]") + "topology:\n  links:\n    - between: [a, b]\n      disabled: true\n"
		}, "networks[1].sites", 22, "member sites b cannot reach member sites a of network lan: topology.links disables every chain of links between them", true},
		{"bridged: subnet overlaps a site", func(t *testing.T) string {
			return bridged(t, "{lan: eth1}", "{lan: eth1}", "sites: [a, b], subnet: 10.2.0.0/16")
		}, "networks[1].subnet", 22, "10.2.0.0/16 overlaps 10.2.0.0/24 of site b", false},
		{"bridged: subnet overlaps transit", func(t *testing.T) string {
			return bridged(t, "{lan: eth1}", "{lan: eth1}", "sites: [a, b], subnet: 10.255.9.0/24")
		}, "networks[1].subnet", 22, "overlaps overlay.transit 10.255.0.0/16", false},
		{"routed network with subnet", func(t *testing.T) string {
			return edit(t, "sites: [a, b]", "sites: [a, b]\n    subnet: 192.168.1.0/24")
		},
			"networks[0].subnet", 20, "network n is routed", false},

		// Addressing.
		{"prefix outside supernet", func(t *testing.T) string {
			return edit(t, "    provider: aws\n", "    provider: aws\n    prefixes: [192.168.1.0/24]\n")
		}, "sites[0].prefixes[0]", 7, "is not inside overlay.supernet 10.0.0.0/8", false},
		{"numbering plan outside supernet", func(t *testing.T) string {
			return edit(t, "    provider: azure\n", "    provider: azure\n    prefixes: [172.16.2.0/24]\n") + "overlay:\n  supernet: 172.16.0.0/12\n"
		}, "sites[0].prefixes", 5, "give the site explicit prefixes", false},
		{"sites overlap", func(t *testing.T) string {
			return edit(t, "    provider: aws\n", "    provider: aws\n    prefixes: [10.2.0.0/16]\n")
		}, "sites[1].prefixes", 11, "10.2.0.0/24 of site b overlaps 10.2.0.0/16 of site a (line 7)", false},
		{"numbering plan overlap", func(t *testing.T) string { return edit(t, "provider: azure", "provider: aws") },
			"sites[1].prefixes", 10, "both come from the numbering plan", false},
		{"prefixes of one site overlap", func(t *testing.T) string {
			return edit(t, "    provider: aws\n", "    provider: aws\n    prefixes: [10.1.0.0/24, 10.1.0.128/25]\n")
		}, "sites[0].prefixes[1]", 7, "another prefix of site a", false},
		{"site overlaps transit", func(t *testing.T) string { return base + "overlay:\n  transit: 10.1.0.0/16\n" },
			"sites[0].prefixes", 5, "overlaps overlay.transit 10.1.0.0/16", false},
		{"unknown provider", func(t *testing.T) string { return edit(t, "provider: aws", "provider: ovh") },
			"sites[0].provider", 6, "known providers: aws (1), azure (2), edge (6), gcp (3), onprem (5), openstack (4); add the provider to providers:", false},
		{"provider missing", func(t *testing.T) string { return edit(t, "    provider: aws\n", "") },
			"sites[0].provider", 5, "provider is missing", false},
		{"provider octet out of range", func(t *testing.T) string { return base + "providers: {ovh: 255}\n" },
			"providers.ovh", 20, "want 1..254", false},
		{"index out of range", func(t *testing.T) string {
			return edit(t, "    provider: aws\n", "    provider: aws\n    index: 256\n")
		},
			"sites[0].index", 7, "want 0..255", false},
		{"lanAddress outside site", func(t *testing.T) string {
			return edit(t, "endpoint: 198.51.100.1:51820\n", "endpoint: 198.51.100.1:51820\n        lanAddress: 10.2.0.1\n")
		}, "sites[0].gateways[0].lanAddress", 10, "not in any prefix of site a (10.1.0.0/24)", false},
		{"lanAddress is broadcast", func(t *testing.T) string {
			return edit(t, "endpoint: 198.51.100.1:51820\n", "endpoint: 198.51.100.1:51820\n        lanAddress: 10.1.0.255\n")
		}, "sites[0].gateways[0].lanAddress", 10, "network or broadcast address", false},
		{"lanAddress twice in a site", func(t *testing.T) string {
			return edit(t, "endpoint: 198.51.100.1:51820\n", "endpoint: 198.51.100.1:51820\n        lanAddress: 10.1.0.7\n      - {name: a-gw2, endpoint: \"198.51.100.3:51820\", lanAddress: 10.1.0.7}\n")
		}, "sites[0].gateways[1].lanAddress", 11, "already the lanAddress of gateway a-gw", false},

		// Transit.
		{"transit not IPv4", func(t *testing.T) string { return base + "overlay:\n  transit: fd00::/64\n" },
			"overlay.transit", 21, "is not IPv4", false},
		{"transit too small", func(t *testing.T) string { return base + "overlay:\n  transit: 10.255.0.0/31\n" },
			"overlay.transit", 21, "want /30 or bigger", false},
		{"transit too small for gateways", func(t *testing.T) string {
			return edit(t, "networks:\n", siteC+"networks:\n") + "overlay:\n  transit: 10.255.0.0/30\n"
		}, "overlay.transit", 22, "holds 2 gateway addresses but the spec has 3 gateways", false},
		{"transitAddress outside transit", func(t *testing.T) string {
			return edit(t, "endpoint: 198.51.100.1:51820\n", "endpoint: 198.51.100.1:51820\n        transitAddress: 10.254.0.1\n")
		}, "sites[0].gateways[0].transitAddress", 10, "not inside overlay.transit 10.255.0.0/16", false},
		{"transitAddress is network address", func(t *testing.T) string {
			return edit(t, "endpoint: 198.51.100.1:51820\n", "endpoint: 198.51.100.1:51820\n        transitAddress: 10.255.0.0\n")
		}, "sites[0].gateways[0].transitAddress", 10, "network address", false},
		{"transitAddress is broadcast address", func(t *testing.T) string {
			return edit(t, "endpoint: 198.51.100.1:51820\n", "endpoint: 198.51.100.1:51820\n        transitAddress: 10.255.255.255\n")
		}, "sites[0].gateways[0].transitAddress", 10, "broadcast address", false},
		{"transitAddress twice", func(t *testing.T) string {
			return edit(t,
				"endpoint: 198.51.100.1:51820\n", "endpoint: 198.51.100.1:51820\n        transitAddress: 10.255.0.9\n",
				"endpoint: 198.51.100.2:51820\n", "endpoint: 198.51.100.2:51820\n        transitAddress: 10.255.0.9\n")
		}, "sites[1].gateways[0].transitAddress", 16, "already the transitAddress of sites[0].gateways[0] (line 10)", false},

		// Gateways.
		{"site without gateway", func(t *testing.T) string {
			return edit(t, "    gateways:\n      - name: b-gw\n        endpoint: 198.51.100.2:51820\n", "    gateways: []\n")
		}, "sites[1].gateways", 12, "site b has no gateway", false},
		{"gateway with neither endpoint nor behindNAT", func(t *testing.T) string {
			return edit(t, "        endpoint: 198.51.100.1:51820\n", "")
		}, "sites[0].gateways[0].endpoint", 8, "neither endpoint nor behindNAT", false},
		{"gateway with endpoint and behindNAT", func(t *testing.T) string {
			return edit(t, "endpoint: 198.51.100.1:51820\n", "endpoint: 198.51.100.1:51820\n        behindNAT: true\n")
		}, "sites[0].gateways[0].behindNAT", 10, "both an endpoint and behindNAT", false},
		{"same endpoint twice", func(t *testing.T) string { return edit(t, "198.51.100.2:51820", "198.51.100.1:51820") },
			"sites[1].gateways[0].endpoint", 14, "already the endpoint of sites[0].gateways[0] (line 9)", false},
		{"same DNS endpoint twice, different case", func(t *testing.T) string {
			return edit(t, "198.51.100.1:51820", "gw.example.com:51820", "198.51.100.2:51820", "GW.example.com.:51820")
		}, "sites[1].gateways[0].endpoint", 14, "already the endpoint of", false},
		{"gateway name missing", func(t *testing.T) string {
			return edit(t, "      - name: a-gw\n        endpoint: 198.51.100.1:51820\n", "      - endpoint: 198.51.100.1:51820\n")
		}, "sites[0].gateways[0].name", 8, "the gateway has no name", false},

		// Topology.
		{"topology mode", func(t *testing.T) string { return base + "topology:\n  mode: star\n" },
			"topology.mode", 21, `"star" is not a topology mode; want mesh`, false},
		{"link to unknown site", func(t *testing.T) string { return base + "topology:\n  links:\n    - between: [a, c]\n" },
			"topology.links[0].between[1]", 22, `unknown site "c"`, false},
		{"link with one site", func(t *testing.T) string { return base + "topology:\n  links:\n    - between: [a]\n" },
			"topology.links[0].between", 22, "names 1 sites; want exactly two", false},
		{"link with three sites", func(t *testing.T) string { return base + "topology:\n  links:\n    - between: [a, b, a]\n" },
			"topology.links[0].between", 22, "want exactly two", false},
		{"link between a site and itself", func(t *testing.T) string { return base + "topology:\n  links:\n    - between: [a, a]\n" },
			"topology.links[0].between", 22, "names site a twice", false},
		{"duplicate link", func(t *testing.T) string {
			return base + "topology:\n  links:\n    - between: [a, b]\n      cost: 2\n    - between: [b, a]\n"
		}, "topology.links[1]", 24, "already given in topology.links[0] (line 22)", false},
		{"link cost 0", func(t *testing.T) string { return base + "topology:\n  links:\n    - between: [a, b]\n      cost: 0\n" },
			"topology.links[0].cost", 23, "want 1 or more", false},
		{"link cost negative", func(t *testing.T) string {
			return base + "topology:\n  links:\n    - between: [a, b]\n      cost: -3\n"
		},
			"topology.links[0].cost", 23, "want 1 or more", false},
		{"implicit link between NAT sites", func(t *testing.T) string {
			return edit(t, "endpoint: 198.51.100.1:51820", "behindNAT: true", "endpoint: 198.51.100.2:51820", "behindNAT: true")
		}, "sites[1]", 10, "nothing can reach either side of their link; disable the link", false},
		{"explicit link between NAT sites", func(t *testing.T) string {
			return edit(t, "endpoint: 198.51.100.1:51820", "behindNAT: true", "endpoint: 198.51.100.2:51820", "behindNAT: true") +
				"topology:\n  links:\n    - between: [a, b]\n      cost: 5\n"
		}, "topology.links[0]", 22, "every gateway of sites a and b is behind NAT", false},
		{"network over a disabled link", func(t *testing.T) string {
			return base + "topology:\n  links:\n    - between: [b, a]\n      disabled: true\n"
		}, "networks[0].sites", 19, "member sites b cannot reach member sites a of network n: topology.links disables every chain of links between them; enable a link between the two groups", false},
		// Lab.
		{"lab hostsPerSite too big", func(t *testing.T) string { return base + "lab:\n  hostsPerSite: 51\n" },
			"lab.hostsPerSite", 21, "want 0..50", false},
		{"lab hostsPerSite negative", func(t *testing.T) string { return base + "lab:\n  hostsPerSite: -1\n" },
			"lab.hostsPerSite", 21, "want 0..50", false},
		{"lab publicAddresses unknown gateway", func(t *testing.T) string {
			return base + "lab:\n  publicAddresses:\n    a-gw: 192.0.2.1\n    z-gw: 192.0.2.2\n"
		}, "lab.publicAddresses.z-gw", 23, `unknown gateway "z-gw"`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.spec(t)
			f, err := Parse([]byte(src))
			if err == nil {
				t.Fatalf("Parse accepted the spec, want a problem at %s\n%s", tt.path, src)
			}
			if f != nil {
				t.Errorf("Parse returned a Federation together with an error")
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error is %T, want *Error: %v", err, err)
			}
			want := fmt.Sprintf("%s: ", tt.path)
			if tt.line > 0 {
				want = fmt.Sprintf("line %d: %s", tt.line, want)
			}
			if tt.path == "" {
				want = strings.TrimSuffix(want, ": ")
			}
			var found bool
			for _, p := range e.Problems {
				if p.Path == tt.path && p.Line == tt.line && strings.Contains(p.Message, tt.msg) {
					found = true
				}
			}
			if !found || !strings.Contains(err.Error(), want) {
				t.Errorf("want a problem %q ... %q; got:\n%v", want, tt.msg, err)
			}
			if !tt.more && len(e.Problems) != 1 {
				t.Errorf("want exactly one problem, got %d:\n%v", len(e.Problems), err)
			}
		})
	}
}
