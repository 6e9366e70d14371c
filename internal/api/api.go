// Package api holds the types of the manager's HTTPS JSON API, shared by
// the manager (internal/manager) and its client (internal/client). It holds
// no logic: paths, request and response bodies, error codes. api/openapi.yaml
// describes the same API for other clients; keep both in step.
package api

import (
	"net/netip"
	"time"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/plandelta"
)

// Paths. {name} is a gateway name, {id} a join token id.
const (
	PathOpenAPI     = "/openapi.yaml"
	PathSpec        = "/v1/spec"      // GET: current spec (ETag: its revision); PUT: new revision (?dryRun=true: diff only; If-Match: "REVISION" precondition)
	PathRevisions   = "/v1/revisions" // GET: list
	PathTokens      = "/v1/tokens"    // GET: list; POST: create
	PathToken       = "/v1/tokens/{id}"
	PathEnroll      = "/v1/enroll" // POST, authenticated by the join token
	PathGateways    = "/v1/gateways"
	PathGateway     = "/v1/gateways/{name}"          // GET; DELETE: revoke ("fednet gateway remove")
	PathPlan        = "/v1/gateways/{name}/plan"     // GET ?after=GENERATION&timeout=30s: long poll
	PathStatus      = "/v1/gateways/{name}/status"   // PUT: the agent's report
	PathKey         = "/v1/gateways/{name}/key"      // PUT: the agent's new public key (rotation)
	PathRotate      = "/v1/gateways/{name}/rotate"   // POST (admin): ask the agent to roll its key
	PathActivate    = "/v1/gateways/{name}/activate" // POST (admin): make it its site's active gateway
	PathSites       = "/v1/sites"
	PathLinks       = "/v1/links"
	PathNetworks    = "/v1/networks"
	PathFederation  = "/v1/status"              // GET: the one-screen overview of `fednet status`
	PathHosts       = "/v1/hosts"               // GET (admin): list; POST: join, authenticated by a host token
	PathHost        = "/v1/hosts/{name}"        // GET, DELETE (leave): the host's credential or the admin token
	PathHostTunnel  = "/v1/hosts/{name}/tunnel" // GET ?after=GENERATION&timeout=30s: long poll (the host's credential)
	MaxRequestBytes = 1 << 20                   // request bodies above this get 413
)

// A spec change (PUT PathSpec) sent with the header Prefer: return=minimal
// (RFC 7240) is answered without the plans' diff, and the answer says
// Preference-Applied: return=minimal. `fednet apply` sends it with the
// change, having shown its dry run's diff; a manager that predates it
// ignores the header, as HTTP has it.
const (
	HeaderPrefer            = "Prefer"
	HeaderPreferenceApplied = "Preference-Applied"
	PreferMinimal           = "return=minimal"
)

// Plan features. A plan watch announces in the HeaderPlanFeatures request
// header (a comma-separated list) the parts of a plan the agent takes
// beyond those every agent takes; the manager leaves out of its answers
// what the request does not announce, so that an older agent gets the
// plans, deltas and sums it always got.
const (
	HeaderPlanFeatures = "Fednet-Plan-Features"
	// PlanFeatureLocal: the plan's local inputs (plan.Gateway.Local, what
	// the agent plans failures with) and, in deltas, their change
	// (plandelta.LocalDelta).
	PlanFeatureLocal = "local"
	// PlanFeaturePatch: with PlanFeatureLocal, the Local's deltas may
	// patch the fields of an entry that changed (plandelta.Edit's patch)
	// instead of sending the entry whole. An agent that announces local
	// alone gets entries whole, as before patches existed.
	PlanFeaturePatch = "patch"
	// PlanFeatureRemotes: a delta's head may leave out the remote
	// addresses of a VXLAN port that the base's head has too, which the
	// delta then edits (plandelta.RemotesEdit): a bridged network over a
	// thousand sites puts a thousand addresses in every head, which a
	// change of one site changes by one.
	PlanFeatureRemotes = "remotes"
	// PlanFeaturePeerRemotes: with PlanFeatureRemotes, a delta's head may
	// also leave out the remotes of a VXLAN port the base lacks (a
	// bridged network added), which the delta then edits from the
	// transit addresses of the new plan's peers (RemotesEdit.peers).
	PlanFeaturePeerRemotes = "peer-remotes"
	// PlanFeatureCompact: with PlanFeaturePeerRemotes, the Local's deltas
	// may count a patch repeated at the end of an edit (plandelta.Edit's
	// repeat) rather than send a null for each entry, and edit the sites
	// of a network the base lacks from those of another network of the
	// base (plandelta.LocalDelta's networkSitesFrom): a bridged network
	// added over a thousand sites is 0.7 kB of Local delta, not 14 kB.
	PlanFeatureCompact = "compact"
)

// Authentication: every call but enrollment and /openapi.yaml carries
// "Authorization: Bearer <token>": the admin token (file admin.token in the
// manager's data directory) for operator calls, a gateway's credential
// (returned by enrollment) for that gateway's own plan, status and key.
// Enrollment carries the join token's secret the same way.

// Error is the body of every error response.
type Error struct {
	// Code is a stable machine-readable word, one of the Code* constants.
	Code string `json:"code"`
	// Message says what is wrong and what would be valid, naming the field.
	Message string `json:"message"`
	// Field is the JSON path or spec path at fault, when there is one.
	Field string `json:"field,omitempty"`
	// Problems lists every problem of a rejected spec (line, path, message).
	Problems []Problem `json:"problems,omitempty"`
	// Revision is, on a 412 (CodePreconditionFailed), the spec revision
	// that is current (0: no spec yet).
	Revision *int `json:"revision,omitempty"`
}

// Error codes and the HTTP status that goes with each.
const (
	CodeBadRequest      = "bad_request"       // 400: malformed JSON, wrong types, unknown fields, bad parameters
	CodeUnauthenticated = "unauthenticated"   // 401: no or unknown token
	CodeForbidden       = "forbidden"         // 403: a valid token that may not do this (another gateway's plan, a revoked gateway)
	CodeNotFound        = "not_found"         // 404
	CodeConflict        = "conflict"          // 409: a used or expired join token, a name taken
	CodeTooLarge        = "too_large"         // 413
	CodeInvalidSpec     = "invalid_spec"      // 422: a spec that fails validation
	CodeInternal        = "internal"          // 500: never for bad input
	CodeTimeout         = "timeout"           // 408: a request body too slow; 504: a gateway did not answer a relayed request in time
	CodeUnsupportedType = "unsupported_media" // 415: not application/json (or YAML for the spec)
	// CodeGatewayRemoved (403): the credential of a gateway that was removed
	// (fednet gateway remove). An agent that gets it stops; one that gets
	// 401 (a credential the manager does not know, e.g. after its state
	// was lost) keeps its data plane and retries.
	CodeGatewayRemoved = "gateway_removed"
	// CodePreconditionFailed (412): PUT /v1/spec with If-Match naming a
	// revision that is no longer the current one; Error.Revision is the
	// current one.
	CodePreconditionFailed = "precondition_failed"
	// CodeInvalidReport (422): a status report that does not fit the
	// gateway's plan (an unknown peer, a number out of range).
	CodeInvalidReport = "invalid_report"
	// CodeTooManyRequests (429): a credential holding too many watches, or
	// an address with too many failed authentications.
	CodeTooManyRequests = "too_many_requests"
)

// Problem is one validation problem of a spec.
type Problem struct {
	Line    int    `json:"line,omitempty"`
	Path    string `json:"path,omitempty"`
	Message string `json:"message"`
}

// SpecRequest is the body of PUT /v1/spec.
type SpecRequest struct {
	// YAML is the spec document as the operator wrote it.
	YAML string `json:"yaml"`
}

// SpecResponse answers GET and PUT /v1/spec.
type SpecResponse struct {
	// Revision is the current revision (GET), the one stored (PUT), or the
	// one a dry run would store.
	Revision int `json:"revision"`
	// BaseRevision is the revision that was current when the manager
	// answered (0: no spec yet): the diff goes from it. To apply exactly
	// the change a dry run showed, PUT with If-Match: "BaseRevision".
	// The ETag header of the answer says the same for GET.
	BaseRevision int       `json:"baseRevision"`
	YAML         string    `json:"yaml"`
	Created      time.Time `json:"created"`
	// DryRun is true when nothing was stored (PUT ?dryRun=true).
	DryRun bool `json:"dryRun,omitempty"`
	// Changed is false when the spec equals the current one (no new
	// revision is made).
	Changed bool `json:"changed"`
	// Diff is a unified diff of the gateways' plans, current → new.
	Diff string `json:"diff"`
	// Affected are the gateways whose plan changes.
	Affected []string `json:"affected"`
}

// Revision is one stored spec revision.
type Revision struct {
	Revision int       `json:"revision"`
	Created  time.Time `json:"created"`
	Sites    int       `json:"sites"`
	Gateways int       `json:"gateways"`
	Networks int       `json:"networks"`
}

// TokenRequest is the body of POST /v1/tokens: either Gateway (a join
// token for a gateway) or Site and Network (a host token: it lets one host
// of that site join that bridged network through a neighbor tunnel).
type TokenRequest struct {
	Gateway string `json:"gateway,omitempty"`
	Site    string `json:"site,omitempty"`
	Network string `json:"network,omitempty"`
	// Replaces, on a host token, names a joined host that a join with the
	// token may replace (keeping its slot); without it, joining under a
	// name that has joined already is refused (409).
	Replaces string `json:"replaces,omitempty"`
	// TTL is a Go duration ("1h"); default 1h, at most 168h.
	TTL string `json:"ttl,omitempty"`
}

// Token describes a join token. Token (the secret-carrying string) is only
// in the response of its creation.
type Token struct {
	ID       string    `json:"id"`
	Gateway  string    `json:"gateway,omitempty"`
	Site     string    `json:"site,omitempty"`
	Network  string    `json:"network,omitempty"`
	Replaces string    `json:"replaces,omitempty"`
	Created  time.Time `json:"created"`
	Expires  time.Time `json:"expires"`
	Used     bool      `json:"used"`
	Revoked  bool      `json:"revoked"`
	Token    string    `json:"token,omitempty"`
}

// EnrollRequest is the body of POST /v1/enroll.
type EnrollRequest struct {
	PublicKey plan.Key `json:"publicKey"`
	// Endpoint is the gateway's own idea of its public endpoint, if any.
	Endpoint string `json:"endpoint,omitempty"`
}

// EnrollResponse answers enrollment.
type EnrollResponse struct {
	Gateway string `json:"gateway"`
	// Credential is the gateway's bearer token from now on.
	Credential string `json:"credential"`
	// ObservedAddress is the source address the manager saw.
	ObservedAddress string `json:"observedAddress"`
	// RotateKey is the key rotation request the enrolled key already
	// answers (see PlanResponse.RotateKey): the agent should remember it as
	// its last answered rotation, or it rolls its new key once more.
	RotateKey int `json:"rotateKey"`
}

// PlanResponse answers the plan watch.
type PlanResponse struct {
	// Generation increases with every change of the manager's state; a
	// gateway's plan carries the generation it last changed at.
	Generation int64 `json:"generation"`
	// Revision is the spec revision the plan was computed from.
	Revision int `json:"revision"`
	// Plan is the whole plan; absent when Delta is set.
	Plan plan.Gateway `json:"plan,omitzero"`
	// Delta, set only for a watch with ?delta=true, turns the plan of
	// generation Base (the watch's after, which the caller holds) into
	// this one (plandelta.Apply); the manager sends it instead of Plan
	// when it holds that version. The client applies it and fills Plan.
	Base  int64            `json:"base,omitempty"`
	Delta *plandelta.Delta `json:"delta,omitempty"`
	// RotateKey, when above the key generation the agent last sent, asks
	// it to generate a new key and PUT its public half.
	RotateKey int `json:"rotateKey"`
}

// KeyRequest is the body of PUT /v1/gateways/{name}/key.
type KeyRequest struct {
	PublicKey plan.Key `json:"publicKey"`
	// Rotation is the RotateKey value this key answers.
	Rotation int `json:"rotation"`
}

// StatusReport is the body of PUT /v1/gateways/{name}/status.
type StatusReport struct {
	Generation int64        `json:"generation"` // of the plan applied
	Revision   int          `json:"revision"`
	ApplyError string       `json:"applyError,omitempty"`
	Links      []LinkStatus `json:"links"`
	// Failover is what the agent's failover holds of its own site; nil
	// from agents that do not fail over (--no-failover, or older).
	Failover *FailoverStatus `json:"failover,omitempty"`
}

// FailoverStatus is a gateway's view of its own site's active gateway
// (docs/resilience.md).
type FailoverStatus struct {
	// Active is the gateway the agent holds active at its site (itself at
	// a one-gateway site); Epoch the active's claim (0 at a one-gateway
	// site, or while the plan's default stands).
	Active string `json:"active"`
	Epoch  uint64 `json:"epoch,omitempty"`
	// ActiveSince is since when the agent has held Active active (its
	// start at the latest).
	ActiveSince time.Time `json:"activeSince"`
	// LastFailover is the last change of the site's active gateway this
	// gateway made (taking over or stepping down); nil when none since
	// the agent started.
	LastFailover *Failover `json:"lastFailover,omitempty"`
}

// Failover is one change of a site's active gateway.
type Failover struct {
	At time.Time `json:"at"`
	// From is the gateway that was active, To the one that is.
	From string `json:"from"`
	To   string `json:"to"`
	// Cause is why, as the election says it ("active gateway onprem-gw1
	// does not answer on the LAN").
	Cause string `json:"cause"`
}

// LinkStatus is the link to one peer as the agent's data plane sees it.
type LinkStatus struct {
	Peer string `json:"peer"` // gateway name
	// Backend is the link's tunnel backend; empty in reports of agents
	// from before tunnel drivers, whose links the manager judges by the
	// handshake's age alone.
	Backend backend.Name `json:"backend,omitempty"`
	// Transport is how the link's packets travel now: udp, or tcp443 when
	// the link fell back to TLS over TCP because UDP is blocked
	// (docs/interop.md); empty in reports of agents from before the
	// fallback.
	Transport backend.Transport `json:"transport,omitempty"`
	// Established is the tunnel driver's verdict that the tunnel works
	// (WireGuard: a handshake within the last three minutes); the link is
	// up when it is established and the probes are answered.
	Established   bool          `json:"established"`
	PublicKey     plan.Key      `json:"publicKey"`
	Endpoint      string        `json:"endpoint,omitempty"`
	LastHandshake time.Time     `json:"lastHandshake,omitempty"`
	HandshakeAge  time.Duration `json:"handshakeAgeNs,omitempty"`
	RxBytes       int64         `json:"rxBytes"`
	TxBytes       int64         `json:"txBytes"`
	// Reason says why a link that is not established failed last, when
	// its driver knows (IPsec: "authentication failed: ...").
	Reason string `json:"reason,omitempty"`
	// Probe holds the link probes' figures; nil when the agent does not
	// probe (yet).
	Probe *LinkProbe `json:"probe,omitempty"`
	// AvailableBandwidth is the latest available-bandwidth estimate of the
	// link in bits per second, 0 when none was made.
	AvailableBandwidth float64 `json:"availableBandwidthBps,omitempty"`
	// Via names the gateway of another site through which this gateway
	// sends the traffic for the peer's site now, when the direct link
	// cannot carry it (a relayed path); empty when direct.
	Via string `json:"via,omitempty"`
}

// LinkProbe is what the link probes of one link measured (docs/probe.md):
// figures over the last minute, and the probes' half of the link-up rule.
type LinkProbe struct {
	// Up is false when the last 3 probes were all lost.
	Up bool `json:"up"`
	// RecentLoss is the share of the last 3 probes that were lost (0 to
	// 1): 1 right after a cut, while Loss still averages the minute.
	RecentLoss float64 `json:"recentLoss"`
	// Window is the span the figures below cover (one minute).
	Window time.Duration `json:"windowNs"`
	Sent   int           `json:"sent"` // probes decided in the window
	Lost   int           `json:"lost"`
	Loss   float64       `json:"loss"` // Lost/Sent, 0 to 1
	// RTT percentiles (nearest rank) over the answered probes, and the
	// RFC 3550 jitter of the latest answer; zero when none was answered.
	RTTP50 time.Duration `json:"rttP50Ns"`
	RTTP99 time.Duration `json:"rttP99Ns"`
	Jitter time.Duration `json:"jitterNs"`
}

// Gateway is the read model of a gateway.
type Gateway struct {
	Name            string     `json:"name"`
	Site            string     `json:"site"`
	Enrolled        bool       `json:"enrolled"`
	Removed         bool       `json:"removed"`
	PublicKey       plan.Key   `json:"publicKey"`
	Endpoint        string     `json:"endpoint,omitempty"`
	ObservedAddress string     `json:"observedAddress,omitempty"`
	TransitAddress  netip.Addr `json:"transitAddress"`
	// Generation of the gateway's current plan, and the one it applied.
	PlanGeneration    int64     `json:"planGeneration"`
	AppliedGeneration int64     `json:"appliedGeneration"`
	AppliedRevision   int       `json:"appliedRevision"`
	ApplyError        string    `json:"applyError,omitempty"`
	LastReport        time.Time `json:"lastReport,omitempty"`
	// EnrolledAt is when the gateway last enrolled (zero if never).
	EnrolledAt time.Time `json:"enrolledAt,omitempty"`
	// RotateKey counts the key rotations asked for; KeyRotation is the one
	// the current key answers (below RotateKey: a rotation is pending).
	RotateKey   int `json:"rotateKey"`
	KeyRotation int `json:"keyRotation"`
	// ActivatedAt is when an operator last made the gateway its site's
	// active gateway (fednet gateway activate; zero if never).
	ActivatedAt time.Time `json:"activatedAt,omitzero"`
}

// Site is the read model of a site.
type Site struct {
	Name     string         `json:"name"`
	Provider string         `json:"provider"`
	Region   string         `json:"region,omitempty"`
	Prefixes []netip.Prefix `json:"prefixes"`
	Gateways []string       `json:"gateways"`
	// Active is the site's active gateway as its gateways report it
	// (the one that reports holding the role, with the highest epoch),
	// and ActiveSince since when; empty while none reported.
	Active      string    `json:"active,omitempty"`
	ActiveSince time.Time `json:"activeSince,omitzero"`
	// LastFailover is the latest change of the active gateway its
	// gateways report, with its cause; nil when none did.
	LastFailover *Failover `json:"lastFailover,omitempty"`
}

// Link is the read model of a link, as the gateway From reports it.
type Link struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Up: a handshake within the last 3 minutes and, when the link is
	// probed, not the last 3 probes lost (docs/probe.md).
	Up bool `json:"up"`
	// Backend and Transport are as From last reported them (LinkStatus);
	// empty when From's agent does not report them.
	Backend       backend.Name      `json:"backend,omitempty"`
	Transport     backend.Transport `json:"transport,omitempty"`
	Endpoint      string            `json:"endpoint,omitempty"`
	LastHandshake time.Time         `json:"lastHandshake,omitempty"`
	RxBytes       int64             `json:"rxBytes"`
	TxBytes       int64             `json:"txBytes"`
	// Probe is the probes' figures as From last reported them; nil when
	// From does not probe.
	Probe *LinkProbe `json:"probe,omitempty"`
	// AvailableBandwidth is From's latest available-bandwidth estimate in
	// bits per second, 0 when none was made.
	AvailableBandwidth float64 `json:"availableBandwidthBps,omitempty"`
	// Egress is the estimated cost of what From sent on the link; nil when
	// the spec's egressPrices has no price for From's site.
	Egress *LinkEgress `json:"egress,omitempty"`
	// Via is, when From relays its traffic for To's site through another
	// site's gateway now, that gateway (LinkStatus.Via); empty when
	// direct.
	Via string `json:"via,omitempty"`
	// Reason is why the link is down as From's tunnel driver last said it
	// (LinkStatus.Reason, e.g. IPsec's "authentication failed: ..."):
	// each direction of a link is its own Link, so the gateway that said
	// it is From. Empty when the link is established or From's driver
	// does not know why.
	Reason string `json:"reason,omitempty"`
}

// LinkEgress is the estimated egress cost of a link: the price of the
// sending site's provider and region times the bytes WireGuard sent (since
// the peer was last configured on the sending gateway).
type LinkEgress struct {
	USDPerGB float64 `json:"usdPerGB"` // the price applied; a GB is 2^30 bytes
	Bytes    int64   `json:"bytes"`    // the bytes sent, TxBytes
	CostUSD  float64 `json:"costUsd"`
}

// Network is the read model of a network.
type Network struct {
	Name  string   `json:"name"`
	ID    int      `json:"id"`
	Mode  string   `json:"mode"`
	Sites []string `json:"sites"`
}

// Overview answers GET /v1/status.
type Overview struct {
	Revision   int       `json:"revision"`
	Generation int64     `json:"generation"`
	Sites      []Site    `json:"sites"`
	Gateways   []Gateway `json:"gateways"`
	Links      []Link    `json:"links"`
}

// HostJoinRequest is the body of POST /v1/hosts (fednet host join).
type HostJoinRequest struct {
	// Name is the host's name, unique among hosts: 1 to 63 lowercase
	// letters, digits and '-'. Joining under a name that has joined
	// already is refused (409) unless the host token was made to replace
	// that host (TokenRequest.Replaces); the replacement keeps its slot.
	Name string `json:"name"`
	// Address is the host's address on its site's LAN, inside one of the
	// site's prefixes: the tunnel's far end on the gateway. Not the
	// prefix's network or broadcast address, not a gateway's LAN address,
	// not another host's.
	Address netip.Addr `json:"address"`
}

// HostJoinResponse answers a join.
type HostJoinResponse struct {
	Host string `json:"host"`
	// Credential is the host's bearer token from now on (tunnel watch,
	// leave).
	Credential string `json:"credential"`
	HostTunnelResponse
}

// HostTunnelResponse answers the tunnel watch: what the host sets up.
type HostTunnelResponse struct {
	// Generation is that of the host's gateway's plan, which the tunnel
	// comes from.
	Generation int64           `json:"generation"`
	Tunnel     plan.HostTunnel `json:"tunnel"`
}

// Host is the read model of a joined host.
type Host struct {
	Name    string     `json:"name"`
	Site    string     `json:"site"`
	Network string     `json:"network"`
	Address netip.Addr `json:"address"`
	Slot    int        `json:"slot"`
	// UDPPort is the tunnel's port (4790 + slot); Gateway the gateway at
	// its far end.
	UDPPort int       `json:"udpPort"`
	Gateway string    `json:"gateway"`
	Joined  time.Time `json:"joined"`
}
