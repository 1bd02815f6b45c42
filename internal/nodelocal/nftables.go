package nodelocal

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// conn opens an nftables connection in h's namespace.
func (h Host) conn() (*nftables.Conn, error) {
	if h.NetNS != 0 {
		return nftables.New(nftables.WithNetNSFd(h.NetNS))
	}
	return nftables.New()
}

// installRules replaces our tables with ones holding exactly specs, in one
// transaction: "add table; delete table; add table …" per family, so a
// table left by an earlier run (or none) ends the same, and a family
// without addresses ends without a table. Packets never see a half-built
// table.
func (h Host) installRules(specs []ruleSpec) error {
	c, err := h.conn()
	if err != nil {
		return err
	}
	for _, t := range ourTables() {
		c.AddTable(t)
		c.DelTable(t)
		var mine []ruleSpec
		for _, s := range specs {
			if s.family() == t.Family {
				mine = append(mine, s)
			}
		}
		if len(mine) == 0 {
			continue
		}
		c.AddTable(t)
		chains := ourChains(t)
		for _, name := range []string{chainPrerouting, chainOutput} {
			c.AddChain(chains[name])
		}
		for _, s := range mine {
			c.AddRule(&nftables.Rule{Table: t, Chain: chains[s.chain], Exprs: s.exprs()})
		}
	}
	return c.Flush()
}

// removeRules deletes our tables (those that exist).
func (h Host) removeRules() error {
	c, err := h.conn()
	if err != nil {
		return err
	}
	for _, t := range ourTables() {
		c.AddTable(t)
		c.DelTable(t)
	}
	return c.Flush()
}

// RuleCount is one installed bypass rule with its counter.
type RuleCount struct {
	Family  string // "ip" or "ip6"
	Chain   string // "prerouting" or "output"
	Rule    string // the rule as ruleSpec.String renders it
	Packets uint64
	Bytes   uint64

	spec ruleSpec // the rule read back (zero when it did not parse)
}

// Counters lists the rules of our tables with their counters; no table is
// an empty list.
func (h Host) Counters() ([]RuleCount, error) {
	c, err := h.conn()
	if err != nil {
		return nil, err
	}
	var out []RuleCount
	for _, t := range ourTables() {
		if _, err := c.ListTableOfFamily(TableName, t.Family); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return nil, err
		}
		for _, name := range []string{chainPrerouting, chainOutput} {
			rules, err := c.GetRules(t, ourChains(t)[name])
			if err != nil {
				return nil, fmt.Errorf("chain %s: %w", name, err)
			}
			for _, r := range rules {
				out = append(out, countOf(t, name, r))
			}
		}
	}
	return out, nil
}

// countOf reads a listed rule back into a RuleCount.
func countOf(t *nftables.Table, chain string, r *nftables.Rule) RuleCount {
	rc := RuleCount{Family: "ip", Chain: chain, Rule: "?"}
	if t.Family == nftables.TableFamilyIPv6 {
		rc.Family = "ip6"
	}
	if s, ok := specOf(chain, r.Exprs); ok {
		rc.Rule, rc.spec = s.String(), s
	}
	for _, e := range r.Exprs {
		if ctr, ok := e.(*expr.Counter); ok {
			rc.Packets, rc.Bytes = ctr.Packets, ctr.Bytes
		}
	}
	return rc
}

// coveredAddrs lists the addresses our tables' rules cover now (those an
// earlier Setup installed the bypass for), each once; no table is none.
func (h Host) coveredAddrs() ([]netip.Addr, error) {
	rules, err := h.Counters()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, r := range rules {
		if r.spec.addr.IsValid() && !slices.Contains(out, r.spec.addr) {
			out = append(out, r.spec.addr)
		}
	}
	return out, nil
}
