// Package nodelocal prepares a node for the node-local meshdns
// (deploy/node-local, docs/node-local.md): `meshdns -node-local-setup
// 169.254.20.10,10.96.0.10` adds each address to lo and installs the
// conntrack bypass that lets pods reach a meshdns bound to them, run by the
// DaemonSet's init container with NET_ADMIN and nothing else (the image is
// FROM scratch: no iptables, no nft, no ip).
//
// The bypass fails open. A pod's query to one of the addresses skips
// conntrack (and so kube-proxy's DNAT) only while a socket is bound to that
// very address and port: the socket match of iptables (xt_socket, wildcard
// listeners ignored) in the raw table's PREROUTING. With the node-local
// process gone (killed, OOM, upgraded, uninstalled) the rule matches
// nothing, the query is tracked and kube-proxy sends it to the cluster DNS
// replicas; nothing has to be cleaned up first (kubernetes/dns#438). The
// node-local's replies (source ADDR, port 53) skip conntrack in OUTPUT:
// a tracked reply would leave an entry whose reply direction is the
// client's next query from the same port, which conntrack would then take
// for a reply of an un-NATed flow and deliver to an address nobody serves
// once the node-local has gone.
//
// Everything lives in tables of its own ("ip meshdns-node-local" and "ip6
// meshdns-node-local"), replaced as a whole in one nftables transaction, so
// a second run installs the same rules again and nothing of kube-proxy's,
// the CNI plugins' or iptables' is touched.
package nodelocal

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
)

// TableName is the name of the nftables tables (family ip and ip6) that
// hold the bypass.
const TableName = "meshdns-node-local"

// Host is the network namespace Setup and Teardown act in.
type Host struct {
	// NetNS is a file descriptor of the network namespace (as of
	// /proc/PID/ns/net or /run/netns/NAME); 0 means the caller's.
	NetNS int
}

// Result says what Setup did.
type Result struct {
	Added   []netip.Addr // addresses added to lo
	Present []netip.Addr // addresses lo already had
	Removed []netip.Addr // addresses an earlier run set up that this one no longer lists, taken off lo
	Rules   []string     // the bypass rules installed, in nft syntax
}

// ParseAddrs parses the argument of -node-local-setup: unicast IPv4 or IPv6
// addresses separated by commas, each once. IPv4-mapped IPv6 addresses
// count as IPv4.
func ParseAddrs(s string) ([]netip.Addr, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("no address")
	}
	var out []netip.Addr
	seen := map[netip.Addr]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP address", f)
		}
		a = a.Unmap()
		switch {
		case a.Zone() != "":
			return nil, fmt.Errorf("%s: an address on lo has no zone", f)
		case a.IsUnspecified(), a.IsMulticast(), a.IsLoopback(), a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
			return nil, fmt.Errorf("%s: not a unicast address a node-local resolver can serve on", f)
		case seen[a]:
			return nil, fmt.Errorf("%s: given twice", f)
		}
		seen[a] = true
		out = append(out, a)
	}
	return out, nil
}

// Setup adds every address to lo (a /32 or /128) and installs the bypass
// for exactly these addresses, replacing what an earlier run installed.
// An address the earlier run's bypass covered and this run does not list
// (taken off the DaemonSet's arguments with the Corefile) is taken off lo:
// the bypass tables are the record of what meshdns set up, so nothing
// else on lo is touched. It is idempotent.
func (h Host) Setup(addrs []netip.Addr) (Result, error) {
	var res Result
	if len(addrs) == 0 {
		return res, errors.New("no address")
	}
	prev, err := h.coveredAddrs()
	if err != nil {
		return res, fmt.Errorf("reading the bypass an earlier run installed: %w", err)
	}
	conn, err := h.dialRoute()
	if err != nil {
		return res, fmt.Errorf("netlink: %w", err)
	}
	defer conn.Close()
	for _, a := range addrs {
		added, err := addToLoopback(conn, a)
		if err != nil {
			return res, fmt.Errorf("adding %s to lo: %w", a, err)
		}
		if added {
			res.Added = append(res.Added, a)
		} else {
			res.Present = append(res.Present, a)
		}
	}
	specs := bypassSpecs(addrs)
	if err := h.installRules(specs); err != nil {
		return res, fmt.Errorf("installing the conntrack bypass: %w", err)
	}
	for _, s := range specs {
		res.Rules = append(res.Rules, s.String())
	}
	for _, a := range prev {
		if slices.Contains(addrs, a) {
			continue
		}
		removed, err := removeFromLoopback(conn, a)
		if err != nil {
			return res, fmt.Errorf("removing %s from lo: %w", a, err)
		}
		if removed {
			res.Removed = append(res.Removed, a)
		}
	}
	return res, nil
}

// Teardown removes the bypass tables and the addresses from lo; what is
// already gone is no error.
func (h Host) Teardown(addrs []netip.Addr) error {
	var errs []error
	if err := h.removeRules(); err != nil {
		errs = append(errs, fmt.Errorf("removing the conntrack bypass: %w", err))
	}
	conn, err := h.dialRoute()
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("netlink: %w", err))...)
	}
	defer conn.Close()
	for _, a := range addrs {
		if _, err := removeFromLoopback(conn, a); err != nil {
			errs = append(errs, fmt.Errorf("removing %s from lo: %w", a, err))
		}
	}
	return errors.Join(errs...)
}

// Main is `meshdns -node-local-setup ADDR[,ADDR…]`: it sets up the caller's
// network namespace, reports to out, and returns the exit code (0, or 1
// with the error on errOut).
func Main(arg string, out, errOut io.Writer) int {
	addrs, err := ParseAddrs(arg)
	if err == nil {
		var res Result
		if res, err = (Host{}).Setup(addrs); err == nil {
			for _, a := range res.Added {
				fmt.Fprintf(out, "node-local setup: %s added to lo\n", prefixOf(a))
			}
			for _, a := range res.Present {
				fmt.Fprintf(out, "node-local setup: %s already on lo\n", prefixOf(a))
			}
			for _, a := range res.Removed {
				fmt.Fprintf(out, "node-local setup: %s removed from lo (no longer listed)\n", prefixOf(a))
			}
			for _, r := range res.Rules {
				fmt.Fprintf(out, "node-local setup: %s\n", r)
			}
			return 0
		}
	}
	fmt.Fprintf(errOut, "node-local setup %q: %v\n", arg, err)
	return 1
}

// prefixOf is a as a single-address prefix (/32 or /128).
func prefixOf(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }
