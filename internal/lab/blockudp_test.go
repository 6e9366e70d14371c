package lab

import (
	"net/netip"
	"strings"
	"testing"
)

func TestBlockUDPRules(t *testing.T) {
	addrs := []netip.Addr{netip.MustParseAddr("203.0.113.11"), netip.MustParseAddr("203.0.113.12")}
	on := blockUDPRules(blockTable("azure-we"), addrs, true)
	for _, want := range []string{
		"add table inet lab_block_udp_azure_we\ndelete table inet lab_block_udp_azure_we\n",
		"ip saddr { 203.0.113.11, 203.0.113.12 } meta l4proto udp counter drop",
		"ip daddr { 203.0.113.11, 203.0.113.12 } meta l4proto udp counter drop",
		"type filter hook forward",
	} {
		if !strings.Contains(on, want) {
			t.Errorf("blocking rules lack %q:\n%s", want, on)
		}
	}
	off := blockUDPRules(blockTable("azure-we"), addrs, false)
	if off != "add table inet lab_block_udp_azure_we\ndelete table inet lab_block_udp_azure_we\n" {
		t.Errorf("unblocking rules:\n%s", off)
	}
}
