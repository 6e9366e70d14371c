#!/usr/bin/env bash
# fednet cloud remove script for site os-lab (openstack) of federation clouds.
# Written by `fednet cloud plan --site os-lab --remove`; review it, then run it
# with bash where `openstack` is installed and logged in. It is idempotent.
#
# It deletes the routes through the site's gateways from router lab-router and the DHCP host routes of subnet lab-subnet,
# the remote prefixes from the gateways' allowed address pairs, and fednet's
# rules for site os-lab from security group fednet-public.
set -euo pipefail

ROUTER='lab-router'
SUBNET='lab-subnet'
SG='fednet-public'
OWNER='clouds/os-lab'
GATEWAYS='10.4.0.254'

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

unroute router "$ROUTER"
unroute subnet "$SUBNET"
unpair 'os-gw-lan' 10.1.0.0/24   # os-gw
unpair 'os-gw-lan' 10.2.0.0/24   # os-gw
unpair 'os-gw-lan' 10.3.0.0/24   # os-gw
unpair 'os-gw-lan' 10.5.0.0/24   # os-gw
fednet_rules | while read -r id proto port src; do
  openstack security group rule delete "$id"
done
