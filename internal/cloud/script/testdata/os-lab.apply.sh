#!/usr/bin/env bash
# fednet cloud apply script for site os-lab (openstack) of federation clouds.
# Written by `fednet cloud plan --site os-lab`; review it, then run it
# with bash where `openstack` is installed and logged in. It is idempotent.
#
# It lets every gateway's LAN port (os-gw) send packets from the remote
# prefixes (allowed address pairs: with port security on, Neutron drops what
# a port sends from an address not its own, and a gateway forwards packets
# from other sites), routes 10.1.0.0/24, 10.2.0.0/24, 10.3.0.0/24, 10.5.0.0/24
# to the active gateway os-gw (10.4.0.254) in router lab-router and the DHCP host routes of subnet lab-subnet,
# and admits the tunnel ports from the peers in security group fednet-public.
# Routes through the site's other gateways and fednet rules the spec no
# longer needs are deleted. Run it again after a failover or a spec change.
# (The alternative to address pairs is a port without port security,
# `openstack port set --no-security-group --disable-port-security PORT`:
# the DMZ of seed 000, at the cost of every filter on that port.)
set -euo pipefail

ROUTER='lab-router'
SUBNET='lab-subnet'
SG='fednet-public'
OWNER='clouds/os-lab'
GATEWAYS='10.4.0.254'
ACTIVE_LAN=10.4.0.254
WANT='10.1.0.0/24 10.2.0.0/24 10.3.0.0/24 10.5.0.0/24'

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

# 1. Every gateway's LAN port may send from the remote prefixes.
pair 'os-gw-lan' 10.1.0.0/24   # os-gw
pair 'os-gw-lan' 10.2.0.0/24   # os-gw
pair 'os-gw-lan' 10.3.0.0/24   # os-gw
pair 'os-gw-lan' 10.5.0.0/24   # os-gw

# 2. Routes to the remote prefixes through the active gateway os-gw.
sync router "$ROUTER"
sync subnet "$SUBNET"   # hosts get these at their next DHCP renewal

# 3. The tunnel ports, from every peer.
rule udp 51820 0.0.0.0/0 IPv4 'fednet clouds/os-lab: peer office-gw'
rule udp 51820 192.0.2.30/32 IPv4 'fednet clouds/os-lab: peer gcp-gw'
rule udp 51820 198.51.100.10/32 IPv4 'fednet clouds/os-lab: peer aws-gw'
rule udp 51820 198.51.100.11/32 IPv4 'fednet clouds/os-lab: peer aws-gw2'
rule udp 51820 203.0.113.20/32 IPv4 'fednet clouds/os-lab: peer azure-gw'
KEEP='udp/51820/0.0.0.0/0 udp/51820/192.0.2.30/32 udp/51820/198.51.100.10/32 udp/51820/198.51.100.11/32 udp/51820/203.0.113.20/32'
fednet_rules | while read -r id proto port src; do
  case " $KEEP " in *" $proto/$port/$src "*) ;; *) openstack security group rule delete "$id" ;; esac
done
