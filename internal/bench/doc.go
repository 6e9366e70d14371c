// Package bench measures what the overlay costs, as `fednet bench` reports
// it: round-trip time (distribution and time series), TCP throughput with
// 1 and 4 streams, UDP at offered rates with loss, bytes on the wire over
// payload (NetFed's traffic overhead), latency under load, and TCP
// throughput against added path delay, each on three paths in one run —
// the overlay (host to host across two sites through the gateways), the
// underlay (gateway to gateway, no tunnel) and a standalone wireguard-go
// tunnel configured by hand without fednet — for the routed network and
// for each bridged network.
//
// On a lab (RunLab) the overlay is measured in the federated lab and the
// underlay and the standalone tunnel in a reference lab of the same two
// sites built for the run, because a federated gateway's firewall admits
// nothing but WireGuard on its public side. On a live federation (RunLive)
// bench runs from one machine against targets running iperf3 -s.
//
// Write turns Results into results.json, results.md, plots (gonum/plot,
// SVG and PNG) and index.html. Statistics (Summarize, Percentile, CDF,
// Ratio) are pure.
package bench
