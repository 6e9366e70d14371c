#!/usr/bin/env bash
# fednet cloud remove script for site azure-we (azure) of federation clouds.
# Written by `fednet cloud plan --site azure-we --remove`; review it, then run it
# with bash where `az` is installed and logged in. It is idempotent.
#
# It deletes fednet's routes (fednet-clouds-*) from route tables app-subnet-rt and its
# rules for site azure-we from NSG azure-gw-nsg, and turns IP forwarding off on the
# gateways' NICs where fednet turned it on (tag fednet-ip-forwarding).
set -euo pipefail

RG='fednet-rg'
OWNER='clouds/azure-we'
PREFIX=fednet-clouds-

# off_forwarding NIC: turn IP forwarding off where fednet turned it on.
off_forwarding() {
  if [ "$(az network nic show -g "$RG" -n "$1" --query 'tags."fednet-ip-forwarding"' -o tsv)" = "$OWNER" ]; then
    az network nic update -g "$RG" -n "$1" --ip-forwarding false --remove "tags.fednet-ip-forwarding" -o none
  fi
}

# delete_named KIND LIST_ARGS...: delete every fednet name KIND lists.
delete_named() {
  local kind=$1; shift
  local name
  for name in $(az network $kind list "$@" --query "[?starts_with(name, '$PREFIX')].name" -o tsv); do
    az network $kind delete "$@" -n "$name" -o none
  done
}

delete_named 'route-table route' -g "$RG" --route-table-name 'app-subnet-rt'
PREFIX=fednet-clouds-azure-we- delete_named 'nsg rule' -g "$RG" --nsg-name 'azure-gw-nsg'
off_forwarding 'azure-gw-nic'   # azure-gw
