#!/usr/bin/env bash
# fednet cloud apply script for site azure-we (azure) of federation clouds.
# Written by `fednet cloud plan --site azure-we`; review it, then run it
# with bash where `az` is installed and logged in. It is idempotent.
#
# It turns IP forwarding on for the NIC of every gateway (azure-gw),
# routes 10.1.0.0/24, 10.3.0.0/24, 10.4.0.0/24, 10.5.0.0/24 to the active gateway azure-gw (10.2.0.254)
# in route tables app-subnet-rt, and admits the tunnel ports from the peers
# in NSG azure-gw-nsg. Routes and rules named fednet-clouds-* that the spec no
# longer needs are deleted. Run it again after a failover or a spec change.
set -euo pipefail

RG='fednet-rg'
OWNER='clouds/azure-we'
PREFIX=fednet-clouds-

# on_forwarding NIC: turn IP forwarding on, tagging the NIC if it was off.
on_forwarding() {
  if [ "$(az network nic show -g "$RG" -n "$1" --query enableIPForwarding -o tsv)" != true ]; then
    az network nic update -g "$RG" -n "$1" --ip-forwarding true --set "tags.fednet-ip-forwarding=$OWNER" -o none
  fi
}

# prune KIND LIST_ARGS... -- KEEP...: delete the fednet names KIND lists
# that are not in KEEP.
prune() {
  local kind=$1; shift
  local args=()
  while [ "$1" != -- ]; do args+=("$1"); shift; done
  shift
  local keep=" $* " name
  for name in $(az network $kind list "${args[@]}" --query "[?starts_with(name, '$PREFIX')].name" -o tsv); do
    case "$keep" in *" $name "*) ;; *) az network $kind delete "${args[@]}" -n "$name" -o none ;; esac
  done
}

# 1. IP forwarding on every gateway's NIC, so that a failover moves only the routes.
on_forwarding 'azure-gw-nic'   # azure-gw

# 2. Routes to the remote prefixes through the active gateway azure-gw.
az network route-table route create -g "$RG" --route-table-name 'app-subnet-rt' -n fednet-clouds-10-1-0-0-24 --address-prefix 10.1.0.0/24 --next-hop-type VirtualAppliance --next-hop-ip-address 10.2.0.254 -o none
az network route-table route create -g "$RG" --route-table-name 'app-subnet-rt' -n fednet-clouds-10-3-0-0-24 --address-prefix 10.3.0.0/24 --next-hop-type VirtualAppliance --next-hop-ip-address 10.2.0.254 -o none
az network route-table route create -g "$RG" --route-table-name 'app-subnet-rt' -n fednet-clouds-10-4-0-0-24 --address-prefix 10.4.0.0/24 --next-hop-type VirtualAppliance --next-hop-ip-address 10.2.0.254 -o none
az network route-table route create -g "$RG" --route-table-name 'app-subnet-rt' -n fednet-clouds-10-5-0-0-24 --address-prefix 10.5.0.0/24 --next-hop-type VirtualAppliance --next-hop-ip-address 10.2.0.254 -o none
prune 'route-table route' -g "$RG" --route-table-name 'app-subnet-rt' -- fednet-clouds-10-1-0-0-24 fednet-clouds-10-3-0-0-24 fednet-clouds-10-4-0-0-24 fednet-clouds-10-5-0-0-24

# 3. The tunnel ports, from every peer (one rule per port).
az network nsg rule create -g "$RG" --nsg-name 'azure-gw-nsg' -n fednet-clouds-azure-we-udp-51820 --priority 3000 --direction Inbound --access Allow --protocol Udp --destination-port-ranges 51820 --source-address-prefixes 0.0.0.0/0 192.0.2.30/32 192.0.2.40/32 198.51.100.10/32 198.51.100.11/32 --description 'fednet clouds/azure-we: udp/51820 from office-gw, gcp-gw, os-gw, aws-gw, aws-gw2' -o none
PREFIX=fednet-clouds-azure-we- prune 'nsg rule' -g "$RG" --nsg-name 'azure-gw-nsg' -- fednet-clouds-azure-we-udp-51820
