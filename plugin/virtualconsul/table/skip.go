package table

import (
	"net/netip"
)

// Reasons an entry is left out of a table (the reason label of
// entries_skipped): a control plane may hold names DNS cannot ask for
// (Consul accepts service names that are not DNS labels), and one such
// entry must not cost the whole table.
const (
	SkipName      = "name"       // not a full-form virtual name, or a label DNS cannot carry
	SkipAddress   = "address"    // none of its addresses is an IP address
	SkipNoAddress = "no_address" // no address at all (e.g. an endpoint by cluster name)
)

// SkipReasons are every reason, so that a table without skips sets each
// series back to 0.
var SkipReasons = []string{SkipName, SkipAddress, SkipNoAddress}

// Usable returns the entries a table can hold, their bad addresses
// dropped, and how many it left out by reason (nil when none). An entry
// keeps its usable addresses; one with none left is skipped.
func Usable(entries []Entry) ([]Entry, map[string]int) {
	var skipped map[string]int
	skip := func(reason string) {
		if skipped == nil {
			skipped = map[string]int{}
		}
		skipped[reason]++
	}
	out := entries[:0:0]
	for _, e := range entries {
		if _, err := CanonicalName(e.Name); err != nil {
			skip(SkipName)
			continue
		}
		if len(e.Addresses) == 0 {
			skip(SkipNoAddress)
			continue
		}
		good := e.Addresses
		for i, a := range e.Addresses {
			if !goodAddress(a) {
				good = goodAddresses(e.Addresses[i:], e.Addresses[:i])
				break
			}
		}
		if len(good) == 0 {
			skip(SkipAddress)
			continue
		}
		out = append(out, Entry{Name: e.Name, Addresses: good})
	}
	return out, skipped
}

// goodAddresses returns kept followed by the good addresses of rest.
func goodAddresses(rest, kept []string) []string {
	out := append([]string(nil), kept...)
	for _, a := range rest {
		if goodAddress(a) {
			out = append(out, a)
		}
	}
	return out
}

// goodAddress is the Builder's test of an address.
func goodAddress(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Zone() == "" && !a.Unmap().IsUnspecified()
}
