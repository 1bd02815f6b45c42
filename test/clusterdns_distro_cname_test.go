package test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/internal/clustergen"

	"github.com/miekg/dns"
)

// The one difference TestDistroServerBlocksAgainstStock accepts beyond
// genAllowed's on paths genAllowed does not see: the documented one-CNAME
// case (clustergen.CNAMEConflicts) reached through autopath's search-name
// CNAME or through a rewritten name, judged as a client sees the reply.

// distroCNAMEReason is why such a difference is accepted.
const distroCNAMEReason = "a name with more than one CNAME candidate reached through this path: the stock plugin " +
	"answers several CNAMEs or CNAMEs beside addresses (invalid DNS, RFC 1034 §3.6.2), meshdns the part of " +
	"that reply a client can use - one CNAME per name, none beside addresses"

// distroCompareAutopath asks, from every client Pod's address, the names a
// client of each of four namespaces sends first with its search list
// (podsAutopathQuestions), of both servers, one after another in the same
// order (the cache in front of autopath keys on the name, not on the
// client). An address that Pods of several namespaces share gets the
// stock reply from the first namespace's own client (the stock plugin
// picks any one; docs/cluster-dns.md). A difference is accepted only as a
// client sees it: the question, or a name the stock reply chains
// through, is of the documented one-CNAME case (genAllowed), and
// meshdns's reply is a part of the stock one that follows its chain -
// autopath's CNAME from the asked name to the search name it found, then
// that name's answer - with one CNAME per name and nothing beside one
// (distroPartOf).
func distroCompareAutopath(t *testing.T, p distroPhase, clients []podsClient, ours, stock string) distroCount {
	t.Helper()
	own := map[string]string{} // namespace → its own client's address
	for _, cl := range clients {
		if cl.namespace != "" {
			own[cl.namespace] = cl.addr
		}
	}
	var n distroCount
	d := genDiff{c: p.c, cnames: p.c.CNAMEConflicts()}
	var ms []genMismatch
	for _, cl := range clients {
		for _, ns := range []string{"default", "shop", "svc", "team-a"} {
			for _, q := range podsAutopathQuestions(p.c, ns) {
				got := podsAskFrom(t, ours, cl.addr, q)
				want := podsAskFrom(t, stock, cl.addr, q)
				n.answers++
				n.autopath++
				if distroSearchCNAME(q, ns, got.msg) {
					n.autopathCNAMEs++
				}
				if cl.shared != nil {
					first := podsAskFrom(t, stock, own[cl.shared[0]], q)
					if want.text != first.text && want.text != podsAskFrom(t, stock, own[cl.shared[1]], q).text {
						t.Errorf("%s, seed %d, %s: stock, from %s (Pods in %v): %s: %s, from neither namespace's client",
							p.b.name, p.seed, p.name, cl.addr, cl.shared, q, want.text)
					}
					want = first
				}
				if got.text == want.text {
					n.alike++
					continue
				}
				d.q, d.ours, d.stock = q, got, want
				reason := ""
				if d.allowed() != "" && distroPartOf(q, got.msg, want.msg) {
					reason = "autopath: " + distroCNAMEReason
				}
				ms = append(ms, genMismatch{Seed: p.seed, Phase: p.b.name + "/" + p.name + "-autopath-" + cl.addr, Q: q, Ours: got.text, Stock: want.text, Reason: reason})
				if reason != "" {
					n.allowed++
					continue
				}
				if n.failed++; n.failed <= 10 {
					t.Errorf("%s, seed %d, %s: autopath from %s: %s:\n  meshdns: %s\n  stock:   %s", p.b.name, p.seed, p.name, cl.addr, q, got.text, want.text)
				}
			}
		}
	}
	if n.autopathCNAMEs == 0 {
		t.Errorf("%s, seed %d, %s: no autopath answer (a CNAME to another search name) among %d questions", p.b.name, p.seed, p.name, n.autopath)
	}
	genReport(t, fmt.Sprintf("distro-seed-%d-%s-%s-autopath", p.seed, p.b.name, p.name), ms)
	return n
}

// distroSearchCNAME: m answers q, asked by a client of namespace ns
// (<base>.<ns>.svc.<zone>), with autopath's CNAME: from the name asked to
// the name under another search domain (svc.<zone>, <zone>, or none).
func distroSearchCNAME(q clustergen.Question, ns string, m *dns.Msg) bool {
	if m == nil {
		return false
	}
	name := strings.ToLower(q.Name)
	base, ok := strings.CutSuffix(name, "."+ns+".svc.cluster.local.")
	if !ok {
		return false
	}
	for _, rr := range m.Answer {
		c, ok := rr.(*dns.CNAME)
		if !ok || strings.ToLower(c.Hdr.Name) != name {
			continue
		}
		switch strings.ToLower(c.Target) {
		case base + ".svc.cluster.local.", base + ".cluster.local.", base + ".":
			return true
		}
	}
	return false
}

// distroRewrittenCNAME: a block that rewrites names onto the cluster zone,
// a question under the rewritten zone (cluster.old, alias.example.test),
// and the difference the documented one-CNAME case once the question and
// the stock reply's CNAME owners are taken back to cluster.local, with
// meshdns's reply a part of the stock one (distroPartOf).
func distroRewrittenCNAME(b distroBlock, d genDiff) bool {
	if !b.rewrite || d.ours.msg == nil || d.stock.msg == nil {
		return false
	}
	name, ok := distroUnrewrite(d.q.Name)
	if !ok {
		return false
	}
	st := d.stock.msg.Copy()
	for _, rr := range st.Answer {
		rr.Header().Name, _ = distroUnrewrite(rr.Header().Name)
	}
	q := clustergen.Question{Name: name, Type: d.q.Type}
	return d.cnames.Deliberate(q, st, d.ours.msg) && distroPartOf(d.q, d.ours.msg, d.stock.msg)
}

// distroUnrewrite is name as the rewrite rules of the operator blocks pass
// it on (cluster.old → cluster.local, alias.example.test →
// svc.cluster.local), lowercased; false when neither applies.
func distroUnrewrite(name string) (string, bool) {
	n := strings.ToLower(name)
	if base, ok := strings.CutSuffix(n, ".cluster.old."); ok {
		return base + ".cluster.local.", true
	}
	if base, ok := strings.CutSuffix(n, ".alias.example.test."); ok {
		return base + ".svc.cluster.local.", true
	}
	return n, false
}

// distroPartOf: meshdns's reply ours to q is the part of the stock reply a
// client can use. Rcode, AA, TC and the additional section are the same;
// every answer record of ours is one of the stock reply's (TTLs left out
// as genAnswer leaves them out); what the stock reply has beyond are
// CNAMEs, and records of the names those CNAMEs meshdns did not answer
// point to (a CNAME question both answer with one CNAME: the stock
// plugin's pick, distroPickedCNAME); the authority section is the same,
// or - a CNAME question the stock plugin answered with the one CNAME it
// picked where meshdns has none beside addresses - meshdns's is the
// zone's SOA of a NODATA.
func distroPartOf(q clustergen.Question, ours, stock *dns.Msg) bool {
	if ours == nil || stock == nil || ours.Rcode != stock.Rcode || ours.Authoritative != stock.Authoritative || ours.Truncated != stock.Truncated {
		return false
	}
	if !clustergen.OneCNAME(ours) {
		return false
	}
	outside := distroOutside(ours) || distroOutside(stock)
	key := func(rr dns.RR) string {
		c := dns.Copy(rr)
		if outside {
			c.Header().Ttl = 0
		}
		return strings.ToLower(strings.ReplaceAll(c.String(), "\t", " "))
	}
	section := func(rrs []dns.RR) string {
		m := map[string]bool{}
		for _, rr := range rrs {
			if rr.Header().Rrtype != dns.TypeOPT {
				m[key(rr)] = true
			}
		}
		return fmt.Sprint(m) // fmt prints a map's keys sorted
	}
	if section(ours.Extra) != section(stock.Extra) {
		return false
	}
	if distroPickedCNAME(q, ours, stock) {
		return section(ours.Ns) == section(stock.Ns)
	}
	theirs, mine := map[string]bool{}, map[string]bool{}
	for _, rr := range stock.Answer {
		theirs[key(rr)] = true
	}
	for _, rr := range ours.Answer {
		if mine[key(rr)] = true; !theirs[key(rr)] {
			return false
		}
	}
	dropped := map[string]bool{} // targets of the stock CNAMEs meshdns did not answer
	for _, rr := range stock.Answer {
		if c, ok := rr.(*dns.CNAME); ok && !mine[key(rr)] {
			dropped[strings.ToLower(c.Target)] = true
		}
	}
	for _, rr := range stock.Answer {
		if !mine[key(rr)] && rr.Header().Rrtype != dns.TypeCNAME && !dropped[strings.ToLower(rr.Header().Name)] {
			return false
		}
	}
	if section(ours.Ns) == section(stock.Ns) {
		return true
	}
	return q.Type == dns.TypeCNAME && len(ours.Answer) == 0 && len(stock.Ns) == 0 &&
		len(ours.Ns) == 1 && ours.Ns[0].Header().Rrtype == dns.TypeSOA
}

// distroPickedCNAME: a CNAME question both answer with one CNAME at the
// same name - the stock plugin's picked from a map of the candidates
// (another from process to process), meshdns's the lexicographically first.
func distroPickedCNAME(q clustergen.Question, ours, stock *dns.Msg) bool {
	if q.Type != dns.TypeCNAME || len(ours.Answer) != 1 || len(stock.Answer) != 1 {
		return false
	}
	a, okA := ours.Answer[0].(*dns.CNAME)
	b, okB := stock.Answer[0].(*dns.CNAME)
	return okA && okB && strings.EqualFold(a.Hdr.Name, b.Hdr.Name)
}

// distroOutside: m holds a record from outside the cluster zones (whose
// TTL the cache counts down; genAnswer leaves such replies' TTLs out).
func distroOutside(m *dns.Msg) bool {
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			if rr.Header().Rrtype != dns.TypeOPT && !genInZones(rr.Header().Name) {
				return true
			}
		}
	}
	return false
}
