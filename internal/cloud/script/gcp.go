package script

import (
	"fmt"
	"strings"

	"github.com/fednet/fednet/internal/spec"
)

// GCP names (routes, firewall rules, network tags): at most 63 characters.
const gcpNameMax = 63

func (w writer) gcp(g *spec.GCPCloud) Script {
	active := w.n.ActiveGateway()
	act := g.Gateways[active.Name]
	tag := w.name(gcpNameMax, w.n.Site)
	routePrefix := w.name(gcpNameMax, w.n.Site, "")
	var routes []string
	for _, p := range w.n.Routes {
		routes = append(routes, w.name(gcpNameMax, w.n.Site, dashed(p)))
	}

	var b strings.Builder
	w.header(&b, "apply", "gcloud", []string{
		fmt.Sprintf("It checks that every gateway (%s) may forward (canIpForward, which", w.gatewayNames()),
		"GCP sets only when an instance is created), tags the gateways " + tag + ",",
		fmt.Sprintf("routes %s to the active gateway %s in network %s,", w.routeList(), active.Name, g.Network),
		"and admits the tunnel ports from the peers to the tagged gateways. Routes and",
		fmt.Sprintf("firewall rules named %s* that the spec no longer needs are deleted.", routePrefix),
		"Run it again after a failover or a spec change.",
	})
	w.gcpPreamble(&b, g, tag)
	b.WriteString(`
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
`)
	b.WriteString("\n# 1. Every gateway may forward, and carries the tag the firewall rules target.\n")
	for _, gw := range w.n.Gateways {
		x := g.Gateways[gw.Name]
		fmt.Fprintf(&b, "forwarding %s %s   # %s\n", quote(x.Instance), quote(x.Zone), gw.Name)
		fmt.Fprintf(&b, "gcloud compute instances add-tags %s --zone %s --project \"$PROJECT\" --tags \"$TAG\"\n", quote(x.Instance), quote(x.Zone))
	}
	fmt.Fprintf(&b, "\n# 2. Routes to the remote prefixes through the active gateway %s.\nACTIVE=%s\nACTIVE_ZONE=%s\n", active.Name, quote(act.Instance), quote(act.Zone))
	for i, p := range w.n.Routes {
		fmt.Fprintf(&b, "route %s %s\n", routes[i], p)
	}
	var rules []string
	b.WriteString("\n# 3. The tunnel ports, from every peer (one rule per port).\n")
	for _, p := range w.ports() {
		name := w.name(gcpNameMax, w.n.Site, portName(p.Ingress))
		rules = append(rules, name)
		allow := p.Protocol.String()
		if p.Port != 0 {
			allow = fmt.Sprintf("%s:%d", p.Protocol, p.Port)
		}
		fmt.Fprintf(&b, "firewall %s %s %s %s\n", name, allow, strings.Join(p.sources, ","), quote(fmt.Sprintf("fednet %s: %s from %s", w.owner(), p.port(), strings.Join(dedup(p.Peers), ", "))))
	}
	fmt.Fprintf(&b, "\nprune routes %s\nprune firewall-rules %s\n", strings.Join(routes, " "), strings.Join(rules, " "))

	var r strings.Builder
	w.header(&r, "remove", "gcloud", []string{
		fmt.Sprintf("It deletes fednet's routes and firewall rules (%s*) and the", routePrefix),
		fmt.Sprintf("gateways' tag %s. canIpForward stays as it is (it cannot be changed).", tag),
	})
	w.gcpPreamble(&r, g, tag)
	r.WriteString(`
# delete_named KIND: delete KIND (routes, firewall-rules) named $PREFIX*.
delete_named() {
  local name
  for name in $(gcloud compute "$1" list --project "$PROJECT" --filter="name ~ ^$PREFIX" --format='value(name)'); do
    gcloud compute "$1" delete "$name" --project "$PROJECT" --quiet
  done
}

delete_named routes
delete_named firewall-rules
`)
	for _, gw := range w.n.Gateways {
		x := g.Gateways[gw.Name]
		fmt.Fprintf(&r, "gcloud compute instances remove-tags %s --zone %s --project \"$PROJECT\" --tags \"$TAG\"   # %s\n", quote(x.Instance), quote(x.Zone), gw.Name)
	}
	return Script{Tool: "gcloud", Apply: b.String(), Remove: r.String()}
}

func (w writer) gcpPreamble(b *strings.Builder, g *spec.GCPCloud, tag string) {
	fmt.Fprintf(b, "\nPROJECT=%s\nNETWORK=%s\nOWNER=%s\nTAG=%s\nPREFIX=%s\n", quote(g.Project), quote(g.Network), quote(w.owner()), tag, w.name(gcpNameMax, w.n.Site, ""))
}
