#!/usr/bin/env bash
# fednet cloud apply script for site gcp-ew (gcp) of federation clouds.
# Written by `fednet cloud plan --site gcp-ew`; review it, then run it
# with bash where `gcloud` is installed and logged in. It is idempotent.
#
# It checks that every gateway (gcp-gw) may forward (canIpForward, which
# GCP sets only when an instance is created), tags the gateways fednet-clouds-gcp-ew,
# routes 10.1.0.0/24, 10.2.0.0/24, 10.4.0.0/24, 10.5.0.0/24 to the active gateway gcp-gw in network default,
# and admits the tunnel ports from the peers to the tagged gateways. Routes and
# firewall rules named fednet-clouds-gcp-ew-* that the spec no longer needs are deleted.
# Run it again after a failover or a spec change.
set -euo pipefail

PROJECT='fednet-demo'
NETWORK='default'
OWNER='clouds/gcp-ew'
TAG=fednet-clouds-gcp-ew
PREFIX=fednet-clouds-gcp-ew-

# forwarding INSTANCE ZONE: refuse to go on unless the instance may forward.
forwarding() {
  if [ "$(gcloud compute instances describe "$1" --zone "$2" --project "$PROJECT" --format='value(canIpForward)')" != True ]; then
    echo "instance $1 was created without --can-ip-forward, so it drops what it forwards; GCP sets this only at creation: recreate the gateway with --can-ip-forward" >&2
    exit 1
  fi
}

# route NAME DESTINATION: a route to the active gateway, replaced when it
# points elsewhere (GCP routes cannot be changed in place).
route() {
  local hop
  hop=$(gcloud compute routes describe "$1" --project "$PROJECT" --format='value(nextHopInstance)' 2>/dev/null || true)
  case "$hop" in
    */zones/"$ACTIVE_ZONE"/instances/"$ACTIVE") return ;;
    "") ;;
    *) gcloud compute routes delete "$1" --project "$PROJECT" --quiet ;;
  esac
  gcloud compute routes create "$1" --project "$PROJECT" --network "$NETWORK" --destination-range "$2" \
    --next-hop-instance "$ACTIVE" --next-hop-instance-zone "$ACTIVE_ZONE" --description "fednet $OWNER" --quiet
}

# firewall NAME RULES SOURCES DESCRIPTION: admit RULES from SOURCES to the
# gateways' tag.
firewall() {
  if gcloud compute firewall-rules describe "$1" --project "$PROJECT" >/dev/null 2>&1; then
    gcloud compute firewall-rules update "$1" --project "$PROJECT" --rules "$2" --source-ranges "$3" --target-tags "$TAG" --description "$4" --quiet
  else
    gcloud compute firewall-rules create "$1" --project "$PROJECT" --network "$NETWORK" --direction INGRESS --action ALLOW \
      --rules "$2" --source-ranges "$3" --target-tags "$TAG" --description "$4" --quiet
  fi
}

# prune KIND KEEP...: delete KIND (routes, firewall-rules) named $PREFIX*
# that are not in KEEP.
prune() {
  local kind=$1; shift
  local keep=" $* " name
  for name in $(gcloud compute "$kind" list --project "$PROJECT" --filter="name ~ ^$PREFIX" --format='value(name)'); do
    case "$keep" in *" $name "*) ;; *) gcloud compute "$kind" delete "$name" --project "$PROJECT" --quiet ;; esac
  done
}

# 1. Every gateway may forward, and carries the tag the firewall rules target.
forwarding 'gcp-gw' 'europe-west1-b'   # gcp-gw
gcloud compute instances add-tags 'gcp-gw' --zone 'europe-west1-b' --project "$PROJECT" --tags "$TAG"

# 2. Routes to the remote prefixes through the active gateway gcp-gw.
ACTIVE='gcp-gw'
ACTIVE_ZONE='europe-west1-b'
route fednet-clouds-gcp-ew-10-1-0-0-24 10.1.0.0/24
route fednet-clouds-gcp-ew-10-2-0-0-24 10.2.0.0/24
route fednet-clouds-gcp-ew-10-4-0-0-24 10.4.0.0/24
route fednet-clouds-gcp-ew-10-5-0-0-24 10.5.0.0/24

# 3. The tunnel ports, from every peer (one rule per port).
firewall fednet-clouds-gcp-ew-udp-51820 udp:51820 0.0.0.0/0,192.0.2.40/32,198.51.100.10/32,198.51.100.11/32,203.0.113.20/32 'fednet clouds/gcp-ew: udp/51820 from office-gw, os-gw, aws-gw, aws-gw2, azure-gw'

prune routes fednet-clouds-gcp-ew-10-1-0-0-24 fednet-clouds-gcp-ew-10-2-0-0-24 fednet-clouds-gcp-ew-10-4-0-0-24 fednet-clouds-gcp-ew-10-5-0-0-24
prune firewall-rules fednet-clouds-gcp-ew-udp-51820
