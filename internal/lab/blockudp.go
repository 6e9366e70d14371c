package lab

import (
	"fmt"
	"net/netip"
	"strings"
)

// blockUDPRules returns the nft script that makes table name (family
// inet, in the internet namespace) drop every UDP packet the internet
// forwards from or to addrs, or, with block false, removes the table. The
// script is idempotent: it first creates the table if absent and deletes
// it.
func blockUDPRules(name string, addrs []netip.Addr, block bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "add table inet %s\ndelete table inet %s\n", name, name)
	if !block || len(addrs) == 0 {
		return b.String()
	}
	set := make([]string, len(addrs))
	for i, a := range addrs {
		set[i] = a.String()
	}
	list := strings.Join(set, ", ")
	fmt.Fprintf(&b, "table inet %s {\n\tchain forward {\n\t\ttype filter hook forward priority -10; policy accept;\n", name)
	fmt.Fprintf(&b, "\t\tip saddr { %s } meta l4proto udp counter drop\n", list)
	fmt.Fprintf(&b, "\t\tip daddr { %s } meta l4proto udp counter drop\n", list)
	b.WriteString("\t}\n}\n")
	return b.String()
}

// blockTable names the table that blocks UDP of site.
func blockTable(site string) string {
	return "lab_block_udp_" + strings.NewReplacer("-", "_", ".", "_").Replace(site)
}
