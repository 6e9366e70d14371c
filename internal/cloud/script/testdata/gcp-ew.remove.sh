#!/usr/bin/env bash
# fednet cloud remove script for site gcp-ew (gcp) of federation clouds.
# Written by `fednet cloud plan --site gcp-ew --remove`; review it, then run it
# with bash where `gcloud` is installed and logged in. It is idempotent.
#
# It deletes fednet's routes and firewall rules (fednet-clouds-gcp-ew-*) and the
# gateways' tag fednet-clouds-gcp-ew. canIpForward stays as it is (it cannot be changed).
set -euo pipefail

PROJECT='fednet-demo'
NETWORK='default'
OWNER='clouds/gcp-ew'
TAG=fednet-clouds-gcp-ew
PREFIX=fednet-clouds-gcp-ew-

# delete_named KIND: delete KIND (routes, firewall-rules) named $PREFIX*.
delete_named() {
  local name
  for name in $(gcloud compute "$1" list --project "$PROJECT" --filter="name ~ ^$PREFIX" --format='value(name)'); do
    gcloud compute "$1" delete "$name" --project "$PROJECT" --quiet
  done
}

delete_named routes
delete_named firewall-rules
gcloud compute instances remove-tags 'gcp-gw' --zone 'europe-west1-b' --project "$PROJECT" --tags "$TAG"   # gcp-gw
