// Package lab builds the sites of a federation spec in network namespaces on
// one machine, runs programs inside them and measures what crosses them.
//
// A lab is an "internet" namespace holding a bridge and the routers of the
// lab's public ranges; per site a switch namespace (a bridge standing in for
// the cloud fabric), one namespace per gateway with a public and a LAN veth,
// and host namespaces whose only route into the overlay points at the
// gateway (standing in for the cloud route table). Every namespace name
// starts with Prefix and the lab's name, so Down finds and removes a lab's
// namespaces and processes even after the program that built it crashed.
//
// The lab never adds an address, route or link to the root network
// namespace: veths are created inside lab namespaces with their peer placed
// directly in another lab namespace.
//
// Measurements (Ping, Iperf3, StartCapture with AnalyzeWire) drive iputils
// ping, iperf3 and tcpdump inside lab namespaces and parse what they report.
package lab
