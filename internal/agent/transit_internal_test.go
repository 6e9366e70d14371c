package agent

import (
	"net/netip"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/ha"
	"github.com/fednet/fednet/internal/plan"
)

// The way back's lead and the encapsulation, on gcp-gw of examples/ha.yaml,
// whose traffic to azure-we normally goes through aws-gw and through
// onprem-gw1 while aws-eu <-> azure-we is down.
func TestWayBackLeadAndEncapsulation(t *testing.T) {
	normal := haPlans(t)["gcp-gw"]
	f := normal.Local.Federation
	cut, err := plan.ForGateway(f, normal.Local.Inputs().WithLinkDown("aws-eu", "azure-we"), "gcp-gw")
	if err != nil {
		t.Fatal(err)
	}
	cut.Local = normal.Local
	now := time.Now()
	st, err := ha.New(ha.Config{Self: "gcp-gw", Federation: f}, now)
	if err != nil {
		t.Fatal(err)
	}
	h := &haSource{state: st, logf: t.Logf}
	h.dec.SelfActive = true
	azure := netip.MustParseAddr("10.255.53.74")
	if a, ok := peerTransits(normal)["azure-gw"]; !ok || a != azure {
		t.Fatalf("azure-gw's transit address %v, want %v", a, azure)
	}
	azureNet := netip.MustParsePrefix("10.2.0.0/24")

	if r := routeTo(cut, azureNet); r.Via != "onprem-gw1" {
		t.Fatalf("with the link down gcp-gw routes %s via %q, want onprem-gw1", azureNet, r.Via)
	}
	// Back from one relay to the other: sent straight to azure-gw during
	// the lead, while it answers; not when it does not.
	if m := h.movingLocked(cut, normal); len(m) != 0 {
		t.Errorf("moving while azure-gw never answered = %v, want nothing (a failover has no lead)", m)
	}
	st.Answered("azure-gw", false, time.Now())
	st.Answered("aws-gw", false, time.Now())
	if m := h.movingLocked(cut, normal); len(m) != 1 || m[azureNet] != azure {
		t.Errorf("moving = %v, want %s to %s", m, azureNet, azure)
	}
	if m := h.movingLocked(normal, normal); len(m) != 0 {
		t.Errorf("moving without a change = %v", m)
	}

	// After the apply: through aws-gw plain only once azure-gw says it
	// takes gcp-ew from aws-gw; until then straight to azure-gw.
	hello := func(g, site string, sends map[string]string) {
		at := time.Now()
		st.Receive(ha.Hello{From: g, Entries: []ha.Entry{{Gateway: g, Site: site, Seq: at.UnixNano(), Sends: sends}}}, at)
	}
	hello("aws-gw", "aws-eu", map[string]string{"gcp-ew": "gcp-gw", "azure-we": "azure-gw"})
	hello("azure-gw", "azure-we", map[string]string{"gcp-ew": "gcp-gw"}) // still direct
	if e := h.encapFor(normal); len(e) != 1 || e[azureNet] != azure {
		t.Errorf("encapsulated while azure-gw still takes gcp-ew directly = %v, want %s to %s", e, azureNet, azure)
	}
	hello("azure-gw", "azure-we", map[string]string{"gcp-ew": "aws-gw"})
	if e := h.encapFor(normal); len(e) != 0 {
		t.Errorf("encapsulated once azure-gw takes gcp-ew from aws-gw = %v, want nothing", e)
	}
}

func routeTo(g plan.Gateway, p netip.Prefix) plan.Route {
	for _, r := range g.Routes {
		if r.Destination == p {
			return r
		}
	}
	return plan.Route{}
}
