package script

import (
	"fmt"
	"strings"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/spec"
)

// Azure names: routes and NSG rules at most 80 characters.
const azureNameMax = 80

// ipForwardingTag marks a NIC whose IP forwarding fednet turned on (it was
// off); its value is FEDERATION/SITE. The remove script turns forwarding
// off again only where the tag is.
const ipForwardingTag = "fednet-ip-forwarding"

func azureProtocol(p backend.Protocol) string {
	switch p {
	case backend.UDP:
		return "Udp"
	case backend.TCP:
		return "Tcp"
	case backend.ESP:
		return "Esp"
	}
	return "*"
}

func (w writer) azure(a *spec.AzureCloud) Script {
	active := w.n.ActiveGateway()
	var b strings.Builder
	w.header(&b, "apply", "az", []string{
		fmt.Sprintf("It turns IP forwarding on for the NIC of every gateway (%s),", w.gatewayNames()),
		fmt.Sprintf("routes %s to the active gateway %s (%s)", w.routeList(), active.Name, active.LAN),
		fmt.Sprintf("in route tables %s, and admits the tunnel ports from the peers", strings.Join(a.RouteTables, ", ")),
		fmt.Sprintf("in NSG %s. Routes and rules named %s* that the spec no", a.NSG, w.namePrefix(azureNameMax)),
		"longer needs are deleted. Run it again after a failover or a spec change.",
	})
	w.azurePreamble(&b, a)
	b.WriteString(`
# on_forwarding NIC: turn IP forwarding on, tagging the NIC if it was off.
on_forwarding() {
  if [ "$(az network nic show -g "$RG" -n "$1" --query enableIPForwarding -o tsv)" != true ]; then
    az network nic update -g "$RG" -n "$1" --ip-forwarding true --set "tags.` + ipForwardingTag + `=$OWNER" -o none
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
`)
	b.WriteString("\n# 1. IP forwarding on every gateway's NIC, so that a failover moves only the routes.\n")
	for _, g := range w.n.Gateways {
		fmt.Fprintf(&b, "on_forwarding %s   # %s\n", quote(a.Gateways[g.Name].NIC), g.Name)
	}
	fmt.Fprintf(&b, "\n# 2. Routes to the remote prefixes through the active gateway %s.\n", active.Name)
	names := w.routeNames(azureNameMax)
	for _, rt := range a.RouteTables {
		for i, p := range w.n.Routes {
			fmt.Fprintf(&b, "az network route-table route create -g \"$RG\" --route-table-name %s -n %s --address-prefix %s --next-hop-type VirtualAppliance --next-hop-ip-address %s -o none\n",
				quote(rt), names[i], p, active.LAN)
		}
		fmt.Fprintf(&b, "prune 'route-table route' -g \"$RG\" --route-table-name %s -- %s\n", quote(rt), strings.Join(names, " "))
	}
	fmt.Fprintf(&b, "\n# 3. The tunnel ports, from every peer (one rule per port).\n")
	var rules []string
	for i, p := range w.ports() {
		name := w.name(azureNameMax, w.n.Site, portName(p.Ingress))
		rules = append(rules, name)
		dport := fmt.Sprint(p.Port)
		if p.Port == 0 {
			dport = "'*'"
		}
		fmt.Fprintf(&b, "az network nsg rule create -g \"$RG\" --nsg-name %s -n %s --priority %d --direction Inbound --access Allow --protocol %s --destination-port-ranges %s --source-address-prefixes %s --description %s -o none\n",
			quote(a.NSG), name, a.Priority+i, azureProtocol(p.Protocol), dport, strings.Join(p.sources, " "), quote(fmt.Sprintf("fednet %s: %s from %s", w.owner(), p.port(), strings.Join(dedup(p.Peers), ", "))))
	}
	fmt.Fprintf(&b, "PREFIX=%s prune 'nsg rule' -g \"$RG\" --nsg-name %s -- %s\n", w.name(azureNameMax, w.n.Site, ""), quote(a.NSG), strings.Join(rules, " "))
	apply := b.String()

	var r strings.Builder
	w.header(&r, "remove", "az", []string{
		fmt.Sprintf("It deletes fednet's routes (%s*) from route tables %s and its", w.namePrefix(azureNameMax), strings.Join(a.RouteTables, ", ")),
		fmt.Sprintf("rules for site %s from NSG %s, and turns IP forwarding off on the", w.n.Site, a.NSG),
		fmt.Sprintf("gateways' NICs where fednet turned it on (tag %s).", ipForwardingTag),
	})
	w.azurePreamble(&r, a)
	r.WriteString(`
# off_forwarding NIC: turn IP forwarding off where fednet turned it on.
off_forwarding() {
  if [ "$(az network nic show -g "$RG" -n "$1" --query 'tags."` + ipForwardingTag + `"' -o tsv)" = "$OWNER" ]; then
    az network nic update -g "$RG" -n "$1" --ip-forwarding false --remove "tags.` + ipForwardingTag + `" -o none
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

`)
	for _, rt := range a.RouteTables {
		fmt.Fprintf(&r, "delete_named 'route-table route' -g \"$RG\" --route-table-name %s\n", quote(rt))
	}
	fmt.Fprintf(&r, "PREFIX=%s delete_named 'nsg rule' -g \"$RG\" --nsg-name %s\n", w.name(azureNameMax, w.n.Site, ""), quote(a.NSG))
	for _, g := range w.n.Gateways {
		fmt.Fprintf(&r, "off_forwarding %s   # %s\n", quote(a.Gateways[g.Name].NIC), g.Name)
	}
	return Script{Tool: "az", Apply: apply, Remove: r.String()}
}

func (w writer) azurePreamble(b *strings.Builder, a *spec.AzureCloud) {
	b.WriteString("\n")
	if a.Subscription != "" {
		fmt.Fprintf(b, "az account set --subscription %s\n", quote(a.Subscription))
	}
	fmt.Fprintf(b, "RG=%s\nOWNER=%s\nPREFIX=%s\n", quote(a.ResourceGroup), quote(w.owner()), w.namePrefix(azureNameMax))
}

// dedup returns items without repeats, in first-seen order.
func dedup(items []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range items {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
