package test

// The one-node cluster leaves the filter, nat, mangle and raw tables of
// both families as it found them (issue 31): the chains the cluster's
// peers made (KUBE-, CNI-, the harness's egress chain) that were not there
// when it started are removed at teardown with every jump to them - the
// kubelet's KUBE-FIREWALL with its INPUT and OUTPUT jumps, its canaries,
// and their IPv6 twins, which kube-proxy --cleanup does not know.

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// iptablesFamilies and iptablesTables are what the record covers.
var (
	iptablesFamilies = []string{"iptables", "ip6tables"}
	iptablesTables   = []string{"filter", "nat", "mangle", "raw"}
)

// clusterChain reports whether a chain is one the cluster's peers make.
func clusterChain(c string) bool {
	return strings.HasPrefix(c, "KUBE-") || strings.HasPrefix(c, "CNI-") || c == egressChain
}

// chainsOf are the user-defined chains of a table's `-S` output.
func chainsOf(rules string) []string {
	var out []string
	for _, l := range strings.Split(rules, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "-N" {
			out = append(out, f[1])
		}
	}
	return out
}

// recordIptables writes the chains present now ("family table chain" a
// line) into state, for removeNewChains.
func recordIptables(state string) error {
	var lines []string
	for _, fam := range iptablesFamilies {
		for _, table := range iptablesTables {
			rules, err := hostRun(fam, "-w", "-t", table, "-S")
			if err != nil {
				continue // a family or table this kernel lacks
			}
			for _, c := range chainsOf(rules) {
				lines = append(lines, fam+" "+table+" "+c)
			}
		}
	}
	return os.WriteFile(filepath.Join(state, "iptables-chains"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// leftoverChains are the cluster's chains in rules (one table's `-S`)
// that were not in before; and the rules to delete first: every jump to
// one of them, from any chain, as `-D` arguments.
func leftoverChains(before map[string]bool, rules string) (chains []string, jumps [][]string) {
	gone := map[string]bool{}
	for _, c := range chainsOf(rules) {
		if clusterChain(c) && !before[c] {
			chains = append(chains, c)
			gone[c] = true
		}
	}
	for _, l := range strings.Split(rules, "\n") {
		args := splitRule(l)
		if len(args) < 4 || args[0] != "-A" {
			continue
		}
		for i := 2; i+1 < len(args); i++ {
			if (args[i] == "-j" || args[i] == "-g") && gone[args[i+1]] && !gone[args[1]] {
				jumps = append(jumps, args[1:])
				break
			}
		}
	}
	sort.Strings(chains)
	return chains, jumps
}

// removeNewChains removes, in both families, the cluster's chains that
// the record in state does not have, after the jumps to them (and
// flushes them first); without a record it does nothing. It tries again
// while any is left (a process of the cluster killed in the middle of its
// own iptables calls may still finish one) and returns what it removed
// and what it could not.
func removeNewChains(state string) (removed, left []string) {
	b, err := os.ReadFile(filepath.Join(state, "iptables-chains"))
	if err != nil {
		return nil, nil
	}
	before := map[string]map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 {
			k := f[0] + " " + f[1]
			if before[k] == nil {
				before[k] = map[string]bool{}
			}
			before[k][f[2]] = true
		}
	}
	done := map[string]bool{}
	for attempt := 0; attempt < 3; attempt++ {
		left = nil
		for _, fam := range iptablesFamilies {
			for _, table := range iptablesTables {
				rules, err := hostRun(fam, "-w", "-t", table, "-S")
				if err != nil {
					continue
				}
				chains, jumps := leftoverChains(before[fam+" "+table], rules)
				for _, j := range jumps {
					_, _ = hostRun(fam, append([]string{"-w", "-t", table, "-D"}, j...)...)
				}
				for _, c := range chains {
					_, _ = hostRun(fam, "-w", "-t", table, "-F", c)
				}
				for _, c := range chains {
					name := fam + "/" + table + "/" + c
					if _, err := hostRun(fam, "-w", "-t", table, "-X", c); err != nil {
						left = append(left, name)
					} else if !done[name] {
						done[name] = true
						removed = append(removed, name)
					}
				}
			}
		}
		if len(left) == 0 && attempt > 0 {
			break
		}
		time.Sleep(200 * time.Millisecond) // and look again: nothing may come back
	}
	return removed, left
}

// TestIptablesLeftovers: the teardown's choice of what to remove from a
// table's rules, read as `iptables -S` prints them (no root needed): the
// kubelet's KUBE-FIREWALL and its INPUT and OUTPUT jumps, a CNI chain
// with the jumps to it from the cluster's chains, and not a chain that
// was there before or one of another program.
func TestIptablesLeftovers(t *testing.T) {
	rules := `-P INPUT ACCEPT
-P FORWARD ACCEPT
-P OUTPUT ACCEPT
-N CNI-FORWARD
-N DOCKER
-N KUBE-FIREWALL
-N KUBE-OLD
-A INPUT -j KUBE-FIREWALL
-A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
-A FORWARD -j DOCKER
-A OUTPUT -j KUBE-FIREWALL
-A OUTPUT -j KUBE-OLD
-A CNI-FORWARD -j KUBE-FIREWALL
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
`
	chains, jumps := leftoverChains(map[string]bool{"KUBE-OLD": true}, rules)
	if got := fmt.Sprint(chains); got != "[CNI-FORWARD KUBE-FIREWALL]" {
		t.Errorf("chains %s, want [CNI-FORWARD KUBE-FIREWALL]", got)
	}
	var got []string
	for _, j := range jumps {
		got = append(got, strings.Join(j, " "))
	}
	want := []string{
		"INPUT -j KUBE-FIREWALL",
		"FORWARD -m comment --comment CNI firewall plugin rules -j CNI-FORWARD",
		"OUTPUT -j KUBE-FIREWALL",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("jumps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
