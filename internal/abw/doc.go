// Package abw estimates the available bandwidth of an overlay link with
// self-loading periodic streams, the method of Pathload (Jain and
// Dovrolis, 2002; seed 000 §4.3.3).
//
// A sender on one gateway sends streams of K UDP packets at a rate R
// through the tunnel to a Responder on the other gateway's transit address
// (port Port, 51822). The responder timestamps each packet as it arrives
// and, when asked, reports the one-way delays. When R exceeds the
// available bandwidth A of the path, the tight link's queue grows during
// the stream and the one-way delays increase; when R is below A they show
// no trend. Two trend statistics (PCT and PDT) classify each stream, a
// fleet of streams at one rate votes, and a binary search over R narrows
// a range [Low, High] that holds A; Pathload's grey region (fleets that
// are neither) ends the search early with the range around it.
//
// Rates are underlay rates: bits per second of the frames the tunnel puts
// on the wire for the probe packets (WireGuard and UDP/IP headers and an
// Ethernet header included), the unit a link's capacity and a tbf limit
// are stated in. Config.Frame changes the framing.
//
// The trend tests and the search are pure (trend.go, search.go) and
// tested with synthetic delays; Estimate drives them over a real socket.
package abw
