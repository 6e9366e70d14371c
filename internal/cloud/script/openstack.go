package script

import (
	"fmt"
	"strings"

	"github.com/fednet/fednet/internal/spec"
)

// openstackHelpers are the shell functions both OpenStack scripts use.
// python3 reads the client's JSON: it is there wherever the openstack
// client (a Python program) is.
const openstackHelpers = `
# current KIND NAME: "DESTINATION NEXTHOP" for each route of router NAME
# (KIND router) or each DHCP host route of subnet NAME (KIND subnet).
current() {
  local field=routes
  [ "$1" = subnet ] && field=host_routes
  openstack "$1" show "$2" -f json -c "$field" | python3 -c '
import json, sys
for r in json.load(sys.stdin)[sys.argv[1]] or []:
    print(r["destination"], r["nexthop"])' "$field"
}

# drop KIND NAME DESTINATION NEXTHOP and add KIND NAME DESTINATION NEXTHOP:
# one route of a router or host route of a subnet.
drop() {
  if [ "$1" = router ]; then openstack router remove route --route "destination=$3,gateway=$4" "$2"
  else openstack subnet unset --host-route "destination=$3,gateway=$4" "$2"; fi
}
add() {
  if [ "$1" = router ]; then openstack router add route --route "destination=$3,gateway=$4" "$2"
  else openstack subnet set --host-route "destination=$3,gateway=$4" "$2"; fi
}

# fednet_rules: "ID PROTOCOL PORT SOURCE" of each ingress rule of $SG whose
# description marks it as this site's (PORT - when the rule has none).
fednet_rules() {
  local id
  for id in $(openstack security group rule list "$SG" --ingress -f value -c ID); do
    openstack security group rule show "$id" -f json | python3 -c '
import json, sys
r = json.load(sys.stdin)
if (r.get("description") or "").startswith("fednet " + sys.argv[1] + ":"):
    print(sys.argv[2], r["protocol"], r["port_range_min"] or "-", r["remote_ip_prefix"])' "$OWNER" "$id"
  done
}
`

func (w writer) openstack(o *spec.OpenStackCloud) Script {
	active := w.n.ActiveGateway()
	var lans, routes []string
	for _, g := range w.n.Gateways {
		lans = append(lans, g.LAN.String())
	}
	for _, p := range w.n.Routes {
		routes = append(routes, p.String())
	}
	var where []string
	if o.Router != "" {
		where = append(where, "router "+o.Router)
	}
	if o.Subnet != "" {
		where = append(where, "the DHCP host routes of subnet "+o.Subnet)
	}

	var b strings.Builder
	w.header(&b, "apply", "openstack", []string{
		fmt.Sprintf("It lets every gateway's LAN port (%s) send packets from the remote", w.gatewayNames()),
		"prefixes (allowed address pairs: with port security on, Neutron drops what",
		"a port sends from an address not its own, and a gateway forwards packets",
		"from other sites), routes " + w.routeList(),
		fmt.Sprintf("to the active gateway %s (%s) in %s,", active.Name, active.LAN, strings.Join(where, " and ")),
		fmt.Sprintf("and admits the tunnel ports from the peers in security group %s.", o.SecurityGroup),
		"Routes through the site's other gateways and fednet rules the spec no",
		"longer needs are deleted. Run it again after a failover or a spec change.",
		"(The alternative to address pairs is a port without port security,",
		"`openstack port set --no-security-group --disable-port-security PORT`:",
		"the DMZ of seed 000, at the cost of every filter on that port.)",
	})
	w.openstackPreamble(&b, o, lans)
	fmt.Fprintf(&b, "ACTIVE_LAN=%s\nWANT=%s\n", active.LAN, quote(strings.Join(routes, " ")))
	b.WriteString(openstackHelpers)
	b.WriteString(`
# pair PORT PREFIX: PREFIX is an allowed address pair of PORT.
pair() {
  if ! openstack port show "$1" -f value -c allowed_address_pairs | grep -qF "'$2'"; then
    openstack port set "$1" --allowed-address "ip-address=$2"
  fi
}

# sync KIND NAME: every wanted destination through the active gateway, and
# no other route through a gateway of the site.
sync() {
  local dst hop
  current "$1" "$2" | while read -r dst hop; do
    case " $GATEWAYS " in *" $hop "*) ;; *) continue ;; esac
    [ "$hop" = "$ACTIVE_LAN" ] && [[ " $WANT " == *" $dst "* ]] && continue
    drop "$1" "$2" "$dst" "$hop"
  done
  local have
  have=$(current "$1" "$2")
  for dst in $WANT; do
    grep -qxF "$dst $ACTIVE_LAN" <<<"$have" || add "$1" "$2" "$dst" "$ACTIVE_LAN"
  done
}

# rule PROTOCOL PORT SOURCE ETHERTYPE DESCRIPTION: admit PROTOCOL/PORT from
# SOURCE (PORT - for none); a rule that exists already is fine.
rule() {
  local out port=()
  [ "$2" != - ] && port=(--dst-port "$2")
  if ! out=$(openstack security group rule create "$SG" --ingress --ethertype "$4" --protocol "$1" "${port[@]}" --remote-ip "$3" --description "$5" 2>&1); then
    case "$out" in *"already exists"*) ;; *) echo "$out" >&2; exit 1 ;; esac
  fi
}
`)
	b.WriteString("\n# 1. Every gateway's LAN port may send from the remote prefixes.\n")
	for _, g := range w.n.Gateways {
		for _, p := range w.n.Routes {
			fmt.Fprintf(&b, "pair %s %s   # %s\n", quote(o.Gateways[g.Name].Port), p, g.Name)
		}
	}
	fmt.Fprintf(&b, "\n# 2. Routes to the remote prefixes through the active gateway %s.\n", active.Name)
	if o.Router != "" {
		b.WriteString("sync router \"$ROUTER\"\n")
	}
	if o.Subnet != "" {
		b.WriteString("sync subnet \"$SUBNET\"   # hosts get these at their next DHCP renewal\n")
	}
	b.WriteString("\n# 3. The tunnel ports, from every peer.\n")
	var keep []string
	for _, in := range w.n.Ingress {
		port := "-"
		if in.Port != 0 {
			port = fmt.Sprint(in.Port)
		}
		ether := "IPv4"
		if in.Source.Addr().Is6() {
			ether = "IPv6"
		}
		what := "peer"
		if len(in.Peers) > 1 {
			what = "peers"
		}
		fmt.Fprintf(&b, "rule %s %s %s %s %s\n", in.Protocol, port, in.Source, ether, quote(fmt.Sprintf("fednet %s: %s %s", w.owner(), what, strings.Join(in.Peers, " "))))
		keep = append(keep, fmt.Sprintf("%s/%s/%s", in.Protocol, port, in.Source))
	}
	fmt.Fprintf(&b, `KEEP=%s
fednet_rules | while read -r id proto port src; do
  case " $KEEP " in *" $proto/$port/$src "*) ;; *) openstack security group rule delete "$id" ;; esac
done
`, quote(strings.Join(keep, " ")))

	var r strings.Builder
	w.header(&r, "remove", "openstack", []string{
		"It deletes the routes through the site's gateways from " + strings.Join(where, " and ") + ",",
		"the remote prefixes from the gateways' allowed address pairs, and fednet's",
		fmt.Sprintf("rules for site %s from security group %s.", w.n.Site, o.SecurityGroup),
	})
	w.openstackPreamble(&r, o, lans)
	r.WriteString(openstackHelpers)
	r.WriteString(`
# unroute KIND NAME: delete every route through a gateway of the site.
unroute() {
  local dst hop
  current "$1" "$2" | while read -r dst hop; do
    case " $GATEWAYS " in *" $hop "*) drop "$1" "$2" "$dst" "$hop" ;; esac
  done
}

# unpair PORT PREFIX: PREFIX is no longer an allowed address pair of PORT.
unpair() {
  if openstack port show "$1" -f value -c allowed_address_pairs | grep -qF "'$2'"; then
    openstack port unset "$1" --allowed-address "ip-address=$2"
  fi
}

`)
	if o.Router != "" {
		r.WriteString("unroute router \"$ROUTER\"\n")
	}
	if o.Subnet != "" {
		r.WriteString("unroute subnet \"$SUBNET\"\n")
	}
	for _, g := range w.n.Gateways {
		for _, p := range w.n.Routes {
			fmt.Fprintf(&r, "unpair %s %s   # %s\n", quote(o.Gateways[g.Name].Port), p, g.Name)
		}
	}
	r.WriteString(`fednet_rules | while read -r id proto port src; do
  openstack security group rule delete "$id"
done
`)
	return Script{Tool: "openstack", Apply: b.String(), Remove: r.String()}
}

func (w writer) openstackPreamble(b *strings.Builder, o *spec.OpenStackCloud, lans []string) {
	b.WriteString("\n")
	if o.Router != "" {
		fmt.Fprintf(b, "ROUTER=%s\n", quote(o.Router))
	}
	if o.Subnet != "" {
		fmt.Fprintf(b, "SUBNET=%s\n", quote(o.Subnet))
	}
	fmt.Fprintf(b, "SG=%s\nOWNER=%s\nGATEWAYS=%s\n", quote(o.SecurityGroup), quote(w.owner()), quote(strings.Join(lans, " ")))
}
