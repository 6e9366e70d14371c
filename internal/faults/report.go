package faults

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/ha"
)

// Manager states a Result records: what the manager was doing when the
// fault was injected.
const (
	ManagerRunning   = "running"
	ManagerDown      = "down"
	ManagerWasKilled = "killed"
)

// Result is what one fault did to the federation. JSON names are the
// suite's public contract (`fednet lab faults --json`).
type Result struct {
	Name string `json:"name"`
	// Target names what failed: a gateway, a link "a<->b" or "a->b", the
	// manager.
	Target string `json:"target"`
	// Path is the TCP transfer's: "client -> server".
	Path string `json:"path"`
	// HeldMs is how long the fault was in place, from the injection to the
	// repair (0 for a fault the federation must heal by itself). An outage
	// threshold proves something only for a fault held longer than it.
	HeldMs float64 `json:"held_ms"`
	// Manager is ManagerRunning, ManagerDown or ManagerWasKilled.
	Manager string `json:"manager"`
	// Pairs counts the probed pairs the fault concerns; Sent, Lost and
	// OutageMs are theirs, from the injection to the end of the fault's
	// run. OutageMs is the longest gap between two answered probes of one
	// pair that holds a lost probe (0 when none was lost). A fault that
	// concerns no pair (standby-down when nothing crosses the standby,
	// manager-killed-during-change) is measured on every pair.
	Pairs    int     `json:"pairs"`
	Sent     int     `json:"sent"`
	Lost     int     `json:"lost"`
	OutageMs float64 `json:"outage_ms"`
	// TCPSurvived: the transfer over Path ended without error and its
	// receiver got bytes after every pair answered again, on the same
	// connection. TCPDetail says why not.
	TCPSurvived bool   `json:"tcp_survived"`
	TCPDetail   string `json:"tcp_detail,omitempty"`
	// Recovered: every probed pair answers again; RecoveredS is when,
	// counted from the repair (from the injection for faults the
	// federation must heal by itself: wgdev-killed).
	Recovered  bool    `json:"recovered"`
	RecoveredS float64 `json:"recovered_s"`
	// Unconcerned* are the pairs the fault does not concern: they must
	// lose nothing.
	UnconcernedPairs int `json:"unconcerned_pairs"`
	UnconcernedSent  int `json:"unconcerned_sent"`
	UnconcernedLost  int `json:"unconcerned_lost"`
	// SiteDown* are the pairs with a host at a site the fault takes down
	// as a whole (relay-down: the relay's own site, whose only gateway
	// fails): they cannot answer until the repair, so they stay out of
	// Sent, Lost and OutageMs, which measure how the rest heals.
	SiteDownPairs    int     `json:"site_down_pairs,omitempty"`
	SiteDownLost     int     `json:"site_down_lost,omitempty"`
	SiteDownOutageMs float64 `json:"site_down_outage_ms,omitempty"`
	// LinkChanges counts the link state changes a flap made; PathChanges
	// the path changes the agents reported meanwhile (nil: not counted).
	LinkChanges int `json:"link_changes,omitempty"`
	// WayBackLost (link-cut) counts the probes every pair lost after the
	// repair: the way back to the repaired link once its hold-down ends,
	// inside the fault's window (WayBackAfter). Nil when not measured.
	WayBackLost *int `json:"way_back_lost,omitempty"`
	PathChanges *int `json:"path_changes,omitempty"`
	// VirtualAddressHolder is the gateway holding the HA site's virtual
	// address after the fault.
	VirtualAddressHolder string `json:"virtual_address_holder,omitempty"`
	// SiteActive and LastFailover are the HA site's active gateway and
	// last failover as the manager shows them after the fault (fednet get
	// sites), read once it names the holder of the virtual address (or
	// after 15 s); empty while the manager is down.
	SiteActive   string        `json:"site_active,omitempty"`
	LastFailover *api.Failover `json:"last_failover,omitempty"`
	// Losses lists every pair that lost probes, concerned or not.
	Losses []PairLoss `json:"losses,omitempty"`
	// Error says why the fault could not be measured (then the numbers
	// above are incomplete).
	Error string `json:"error,omitempty"`
}

// PairLoss is one probed pair's losses during a fault.
type PairLoss struct {
	Pair      string  `json:"pair"`
	Concerned bool    `json:"concerned"`
	Sent      int     `json:"sent"`
	Lost      int     `json:"lost"`
	OutageMs  float64 `json:"outage_ms"`
	// Gaps are the pair's first runs of lost probes, as
	// "+START s for MS ms" from the injection: when the losses happened
	// tells what caused them.
	Gaps []string `json:"gaps"`
}

// maxGaps bounds PairLoss.Gaps.
const maxGaps = 5

// Check is one threshold of the "done when" applied to a result.
type Check struct {
	Name   string `json:"name"`
	Passed bool   `json:"passed"`
	Detail string `json:"detail"`
}

// Report is a run of the suite. The JSON ends with ChecksPassed.
type Report struct {
	Federation string `json:"federation"`
	Lab        string `json:"lab"`
	// Manager is ManagerRunning, or ManagerDown with --manager-down (the
	// manager stopped once every agent had its plan).
	Manager string `json:"manager"`
	// HASite is the site with two gateways the gateway faults hit;
	// VirtualAddress says who holds its virtual address: "agents", or
	// "suite" when no agent held it and the suite added it to the active
	// gateway by hand (lab.HoldVirtualAddress).
	HASite         string   `json:"ha_site"`
	VirtualAddress string   `json:"virtual_address"`
	Pairs          int      `json:"pairs"`
	IntervalMs     float64  `json:"interval_ms"`
	TransferMbps   float64  `json:"transfer_mbps"`
	ConvergedS     float64  `json:"converged_s"`
	DurationS      float64  `json:"duration_s"`
	Faults         []Result `json:"faults"`
	Checks         []Check  `json:"checks"`
	ChecksPassed   bool     `json:"checks_passed"`
}

// Thresholds of the "done when".
const (
	// GatewayOutageMs bounds the outage of a gateway failover.
	GatewayOutageMs = 1000
	// LinkOutageMs bounds the outage of a rerouted link.
	LinkOutageMs = 3000
)

// WayBackAfter is how long link-cut watches after its repair, at least:
// the agents' hold-down (ha.DefaultHoldDown) and 4 s, so that the way
// back to the repaired link, and a second of answers after it, fall
// inside the window.
const WayBackAfter = ha.DefaultHoldDown + 4*time.Second

// Evaluate returns the checks of results: every fault measured and
// recovered; unconcerned pairs lost nothing; the outage and TCP thresholds
// of the gateway faults; the outage thresholds of the link faults; no
// loss for standby-down and agent-killed; the TCP connection of
// operator-activate; a flap that ends with every pair
// answering and no more path changes than link changes.
func Evaluate(results []Result) []Check {
	var checks []Check
	add := func(r Result, what string, ok bool, format string, args ...any) {
		checks = append(checks, Check{Name: r.Name + ": " + what, Passed: ok, Detail: fmt.Sprintf(format, args...)})
	}
	for _, r := range results {
		if r.Error != "" {
			add(r, "measured", false, "%s", r.Error)
			continue
		}
		add(r, "recovered", r.Recovered, "every pair answers %.2f s after the repair", r.RecoveredS)
		add(r, "unconcerned pairs lose nothing", r.UnconcernedLost == 0, "%d of %d probes lost over %d pairs", r.UnconcernedLost, r.UnconcernedSent, r.UnconcernedPairs)
		switch r.Name {
		case ActiveGatewayDown, ActiveUplinkCut, WGDevKilled:
			ok, held := outageCheck(r, GatewayOutageMs)
			add(r, fmt.Sprintf("outage <= %d ms, TCP survives", GatewayOutageMs), ok && r.TCPSurvived,
				"outage %.0f ms%s, TCP survived %v%s", r.OutageMs, held, r.TCPSurvived, suffix(r.TCPDetail))
		case LinkCut, LinkCutOneWay, RelayDown:
			ok, held := outageCheck(r, LinkOutageMs)
			add(r, fmt.Sprintf("outage <= %d ms", LinkOutageMs), ok, "outage %.0f ms%s", r.OutageMs, held)
			if r.WayBackLost != nil {
				add(r, "the way back loses nothing", *r.WayBackLost == 0, "%d probes lost after the repair", *r.WayBackLost)
			}
		case StandbyDown, AgentKilled:
			add(r, "no loss", r.Lost == 0, "%d of %d probes lost", r.Lost, r.Sent)
		case OperatorActivate:
			// A handover loses nothing (docs/resilience.md, lossless
			// moves), and the connection carries on.
			add(r, "no loss, TCP survives", r.Lost == 0 && r.TCPSurvived, "%d of %d probes lost, outage %.0f ms, TCP survived %v%s", r.Lost, r.Sent, r.OutageMs, r.TCPSurvived, suffix(r.TCPDetail))
		case LinkFlap:
			ok := r.PathChanges != nil && *r.PathChanges <= r.LinkChanges
			changes := "not counted"
			if r.PathChanges != nil {
				changes = fmt.Sprint(*r.PathChanges)
			}
			add(r, "no more path changes than link changes", ok, "%s path changes for %d link changes", changes, r.LinkChanges)
		}
	}
	return checks
}

// outageCheck applies an outage threshold to r: the outage stays within
// it, and the fault was held longer than it (or heals by itself), else a
// short fault would pass without any failover. held explains a failure of
// the second kind.
func outageCheck(r Result, thresholdMs float64) (ok bool, held string) {
	if r.HeldMs > 0 && r.HeldMs <= thresholdMs {
		return false, fmt.Sprintf(" but the fault was held only %.0f ms: hold it longer than %.0f ms", r.HeldMs, thresholdMs)
	}
	return r.OutageMs <= thresholdMs, ""
}

// Passed reports whether there are checks and all passed.
func Passed(checks []Check) bool {
	return len(checks) > 0 && !slices.ContainsFunc(checks, func(c Check) bool { return !c.Passed })
}

// Line renders a result on one line for people, as the demo prints its
// checks: "ok  " or "FAIL" (any of its checks failed), the name and the
// figures.
func Line(r Result, checks []Check) string {
	mark := "ok  "
	for _, c := range checks {
		if strings.HasPrefix(c.Name, r.Name+": ") && !c.Passed {
			mark = "FAIL"
		}
	}
	if r.Error != "" {
		return fmt.Sprintf("%s %-28s %s", mark, r.Name, r.Error)
	}
	tcp := "TCP survived"
	if !r.TCPSurvived {
		tcp = "TCP broke" + suffix(r.TCPDetail)
	}
	rec := fmt.Sprintf("recovered %.2f s after repair", r.RecoveredS)
	if !r.Recovered {
		rec = "NOT recovered"
	}
	s := fmt.Sprintf("%s %-28s %-22s %5d sent %5d lost, outage %6.0f ms, %s, %s; unconcerned pairs lost %d of %d (manager %s)",
		mark, r.Name, r.Target, r.Sent, r.Lost, r.OutageMs, tcp, rec, r.UnconcernedLost, r.UnconcernedSent, r.Manager)
	if r.SiteDownPairs > 0 {
		s += fmt.Sprintf("; the failed site's %d pairs lost %d, outage %.0f ms", r.SiteDownPairs, r.SiteDownLost, r.SiteDownOutageMs)
	}
	if r.Name == LinkFlap {
		changes := "?"
		if r.PathChanges != nil {
			changes = fmt.Sprint(*r.PathChanges)
		}
		s += fmt.Sprintf("; %s path changes for %d link changes", changes, r.LinkChanges)
	}
	return s
}

// Table renders the results as a Markdown table, for notes and docs.
func Table(results []Result) string {
	var b strings.Builder
	b.WriteString("| fault | target | manager | sent | lost | outage ms | TCP survived | recovered (s) | unconcerned lost |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---|---|---:|\n")
	for _, r := range results {
		if r.Error != "" {
			fmt.Fprintf(&b, "| %s | %s | %s | | | | | error: %s | |\n", r.Name, r.Target, r.Manager, r.Error)
			continue
		}
		rec := "no"
		if r.Recovered {
			rec = fmt.Sprintf("yes (%.2f)", r.RecoveredS)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %.0f | %v | %s | %d |\n",
			r.Name, r.Target, r.Manager, r.Sent, r.Lost, r.OutageMs, r.TCPSurvived, rec, r.UnconcernedLost)
	}
	return b.String()
}

func suffix(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}
