package kubesource

import (
	"bytes"
	"fmt"
	"math/rand"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"unique"

	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/endpointsvc/orch"
	"github.com/meshdns/meshdns/plugin/pkg/jsonw"
)

// TestOrchPatchIsWhole: for a few seeds, a run of generated changes -
// endpoints that turn ready or unready or move to another node (also one
// the store does not hold), slices deleted and new ones (IPv4, IPv6 or
// FQDN, also FQDNs the orch model cannot answer with), Services changed,
// deleted (their slices kept) and back, Nodes that come, go, go down,
// come back or change their address (also to none the mapping can use),
// slices labelled with a Service's name in capitals (of no Service:
// labels are matched exactly, as the stock plugin does) - each applied
// to the stores and patched onto the table by one orchModel, whose
// mapped nodes carry over from patch to patch, leaves the table a whole
// mapping of the stores builds, in node and in endpoint mode. A Node's
// change is sometimes marked a patch late (its event handler runs after
// the next slice's patch): the tables are compared once every mark is in.
// Now and then the stores change unmarked and are mapped whole, as after
// a relist. Every tenth step, the snapshot the model writes from the
// stores loads as the whole mapping too (its slices' ports vary: a
// service's tasks fall in groups by their ports). And the change log
// holds: the patches' records, each encoded a few patches late (as the
// snapshot writer's flush does, after the model reused the tasks' array
// for the patches since), replayed onto the snapshot of the last whole
// mapping, load as the whole mapping at every step.
func TestOrchPatchIsWhole(t *testing.T) {
	zones := []string{"cluster.local."}
	for seed := range int64(6) {
		for _, endpointMode := range []bool{false, true} {
			t.Run(fmt.Sprintf("seed=%d/endpoint=%v", seed, endpointMode), func(t *testing.T) {
				rng := rand.New(rand.NewSource(seed))
				st := genOrchStores(rng)
				m := &orchModel{}
				tbl := orch.BuildTable(m.whole(st).(*orch.State), zones, false, endpointMode, nil)
				late := map[string]bool{} // node marks not delivered yet
				log := newRecordLog(t, m, st)
				for step := range 300 {
					c := changes{names: map[string]bool{}, nodes: map[string]bool{}}
					for n := range late {
						c.nodes[n] = true
					}
					clear(late)
					if rng.Intn(40) == 0 { // a relist: changes unmarked, the stores mapped whole
						genNodeChange(rng, st)
						tbl = orch.BuildTable(m.whole(st).(*orch.State), zones, false, endpointMode, nil)
						log = newRecordLog(t, m, st) // a whole state supersedes the log
						continue
					}
					if rng.Intn(3) == 0 {
						n := genNodeChange(rng, st)
						if rng.Intn(3) == 0 {
							late[n] = true
						} else {
							c.nodes[n] = true
						}
					} else if rng.Intn(5) == 0 {
						c.names[genServiceChange(rng, st)] = true
					} else {
						c.names[genSliceChange(rng, st)] = true
					}
					p := m.patch(st, c, nil).(*orch.Patch)
					tbl = tbl.Patched(p, zones, false, endpointMode, nil)
					log.add(p, rng.Intn(4) == 0)
					if len(late) > 0 {
						continue
					}
					forgetMappings(st) // the whole mapping maps every Service anew: no mapping a patch kept is stale
					want := orch.BuildTable((&orchModel{}).whole(st).(*orch.State), zones, false, endpointMode, nil)
					if got, w := listing(t, tbl), listing(t, want); got != w {
						t.Fatalf("step %d: patched table\n%s\nwant (whole)\n%s", step, got, w)
					}
					if got, w := listing(t, orch.BuildTable(log.replayed(), zones, false, endpointMode, nil)), listing(t, want); got != w {
						t.Fatalf("step %d: the snapshot and its change log\n%s\nwant (whole)\n%s", step, got, w)
					}
					if step%10 == 0 { // the snapshot, written from the stores as a compaction writes it, loads as the whole mapping
						var buf bytes.Buffer
						if err := m.snapshot(&buf, st); err != nil {
							t.Fatal(err)
						}
						loaded, err := orch.DecodeSnapshot(buf.Bytes())
						if err != nil {
							t.Fatalf("step %d: the snapshot does not load: %v", step, err)
						}
						if got, w := listing(t, orch.BuildTable(loaded, zones, false, endpointMode, nil)), listing(t, want); got != w {
							t.Fatalf("step %d: the snapshot's table\n%s\nwant (whole)\n%s\nsnapshot:\n%s", step, got, w, buf.String())
						}
						if got, w := taskList(loaded), taskList((&orchModel{}).whole(st).(*orch.State)); !slices.Equal(got, w) {
							t.Fatalf("step %d: the snapshot's tasks\n%s\nwant (whole)\n%s", step, strings.Join(got, "\n"), strings.Join(w, "\n"))
						}
					}
				}
			})
		}
	}
}

// recordLog is a snapshot and the change log after it, as the snapshot
// writer keeps them: patches wait until a flush encodes their records.
type recordLog struct {
	t       *testing.T
	snap    []byte
	pending []*orch.Patch
	recs    [][]byte
}

// newRecordLog starts a log on the snapshot the model writes of st.
func newRecordLog(t *testing.T, m *orchModel, st stores) *recordLog {
	var buf bytes.Buffer
	if err := m.snapshot(&buf, st); err != nil {
		t.Fatal(err)
	}
	return &recordLog{t: t, snap: buf.Bytes()}
}

// add queues p, and with flush encodes the queued patches' records.
func (l *recordLog) add(p *orch.Patch, flush bool) {
	l.pending = append(l.pending, p)
	if flush {
		l.flush()
	}
}

func (l *recordLog) flush() {
	for _, p := range l.pending {
		l.recs = append(l.recs, p.AppendRecord(nil))
	}
	l.pending = nil
}

// replayed is the snapshot with every record replayed, the queued ones
// encoded first.
func (l *recordLog) replayed() *orch.State {
	l.t.Helper()
	l.flush()
	st, err := orch.DecodeSnapshot(l.snap)
	if err != nil {
		l.t.Fatal(err)
	}
	out, n, err := orch.Replay(st, l.recs)
	if err != nil || n != len(l.recs) {
		l.t.Fatalf("replay: %d of %d records: %v", n, len(l.recs), err)
	}
	return out
}

const genNodes = 8

// genOrchStores holds 20 Services in 3 namespaces (genNamespace), one
// slice of 1 to 4 endpoints each (some a second slice, two none), on
// genNodes + 1 node names of which the store holds genNodes (node-8 is
// never there), and slices of Services that are not stored.
func genOrchStores(rng *rand.Rand) stores {
	st := newStores()
	for n := range genNodes {
		_ = st.nodes.Add(genOrchNode(rng, n))
	}
	ep := 0
	for i := range 20 {
		ns := genNamespace(i)
		s := &kService{kMeta: kMeta{Name: fmt.Sprintf("svc-%d", i), Namespace: ns, ResourceVersion: "1"}}
		s.svc = k8sdns.Service{Namespace: ns, Name: s.Name, Kind: k8sdns.Headless,
			Ports: []k8sdns.Port{{Name: "http", Protocol: "TCP", Port: 80}}}
		_ = st.svcs.Add(s)
		sl := &kSlice{kMeta: kMeta{Name: s.Name + "-x", Namespace: ns, ResourceVersion: "1"}}
		sl.sl = k8sdns.Slice{Namespace: ns, Name: sl.Name, Service: s.Name, Type: k8sdns.IPv4,
			Ports: []k8sdns.Port{{Name: "http", Protocol: "TCP", Port: 8080}}}
		for range 1 + rng.Intn(4) {
			ep++
			_ = sl.sl.Add(k8sdns.EndpointSpec{Ready: k8sdns.True, NodeName: fmt.Sprintf("node-%d", rng.Intn(genNodes+1)),
				Addresses: []string{netip.AddrFrom4([4]byte{10, 100, byte(ep >> 8), byte(ep)}).String()}})
		}
		sl.sl.Compact()
		if i%7 != 5 { // Service 5 and 12 have no slice
			_ = st.slices.Add(sl)
		}
		if i%6 == 2 { // a slice of a Service that is not stored, ordered between two that are
			orphan := &kSlice{kMeta: kMeta{Name: s.Name + "-gone", Namespace: ns, ResourceVersion: "1"}, sl: sl.sl}
			orphan.sl.Name, orphan.sl.Service = orphan.Name, s.Name+"-gone"
			_ = st.slices.Add(orphan)
		}
		if i%5 == 3 { // a slice mislabelled in capitals: of no Service (a label is matched exactly, as the stock plugin does)
			ml := &kSlice{kMeta: kMeta{Name: s.Name + "-m", Namespace: ns, ResourceVersion: "1"}, sl: sl.sl}
			ml.sl.Name, ml.sl.Service = ml.Name, mislabel(s.Name)
			_ = st.slices.Add(ml)
		}
		if i%4 == 1 { // a second slice, of other ports
			sl := &kSlice{kMeta: kMeta{Name: s.Name + "-y", Namespace: ns, ResourceVersion: "1"}}
			sl.sl = k8sdns.Slice{Namespace: ns, Name: sl.Name, Service: s.Name, Type: k8sdns.IPv4, Ports: genPorts[1]}
			ep++
			_ = sl.sl.Add(k8sdns.EndpointSpec{Ready: k8sdns.True, NodeName: fmt.Sprintf("node-%d", rng.Intn(genNodes+1)),
				Addresses: []string{netip.AddrFrom4([4]byte{10, 100, byte(ep >> 8), byte(ep)}).String()}})
			sl.sl.Compact()
			_ = st.slices.Add(sl)
		}
	}
	// A Service in capitals (no API server stores one) with its slice: left
	// out by every mapping alike.
	s := &kService{kMeta: kMeta{Name: "Svc-caps", Namespace: "ns", ResourceVersion: "1"}}
	s.svc = k8sdns.Service{Namespace: "ns", Name: s.Name, Kind: k8sdns.Headless, Ports: []k8sdns.Port{{Name: "http", Protocol: "TCP", Port: 80}}}
	_ = st.svcs.Add(s)
	sl := &kSlice{kMeta: kMeta{Name: "svc-caps-x", Namespace: "ns", ResourceVersion: "1"}}
	sl.sl = k8sdns.Slice{Namespace: "ns", Name: sl.Name, Service: s.Name, Type: k8sdns.IPv4, Ports: genPorts[0]}
	_ = sl.sl.Add(k8sdns.EndpointSpec{Ready: k8sdns.True, NodeName: "node-0", Addresses: []string{"10.100.255.1"}})
	sl.sl.Compact()
	_ = st.slices.Add(sl)
	return st
}

// mislabel is a Service's name in capitals, as a slice's label that
// names no Service.
func mislabel(name string) string { return strings.ToUpper(name[:1]) + name[1:] }

// genNamespace is Service i's namespace: of three whose order is not
// that of their Services' IDs ("ns-1/…" sorts before "ns/…").
func genNamespace(i int) string { return [...]string{"ns", "ns-1", "ns-a"}[i%3] }

// genPorts are the ports a generated slice has.
var genPorts = [][]k8sdns.Port{
	{{Name: "http", Protocol: "TCP", Port: 8080}},
	{{Name: "metrics", Protocol: "TCP", Port: 9090}},
	{{Name: "http", Protocol: "TCP", Port: 8080}, {Name: "metrics", Protocol: "TCP", Port: 9090}},
	nil,
}

// genOrchNode is node n with a random address (or one the mapping cannot
// use) and Ready condition.
func genOrchNode(rng *rand.Rand, n int) *kNode {
	k := &kNode{kMeta: kMeta{Name: fmt.Sprintf("node-%d", n), ResourceVersion: fmt.Sprint(rng.Int())}, readyFalse: rng.Intn(4) == 0}
	switch rng.Intn(6) {
	case 0: // no address
	case 1:
		k.addresses[0] = "not an address"
	default:
		k.addresses[rng.Intn(2)] = netip.AddrFrom4([4]byte{10, 0, byte(n), byte(rng.Intn(4))}).String()
	}
	return k
}

// genNodeChange changes, adds or deletes a node in the store and returns
// its name.
func genNodeChange(rng *rand.Rand, st stores) string {
	n := rng.Intn(genNodes)
	k := genOrchNode(rng, n)
	if o, ok, _ := st.nodes.GetByKey(k.Name); ok && rng.Intn(4) == 0 {
		_ = st.nodes.Delete(o)
	} else {
		_ = st.nodes.Update(k) // adds a node the store does not hold
	}
	return k.Name
}

// genServiceChange replaces a Service's object in the store with one of
// other ports, or of kind ExternalName (which the mapping leaves out), or
// back to headless, or deletes it (its slices stay), and returns its name
// as the dirty set marks it.
func genServiceChange(rng *rand.Rand, st stores) string {
	i := rng.Intn(20)
	ns, name := genNamespace(i), fmt.Sprintf("svc-%d", i)
	s := &kService{kMeta: kMeta{Name: name, Namespace: ns, ResourceVersion: fmt.Sprint(rng.Int())}}
	s.svc = k8sdns.Service{Namespace: ns, Name: name, Kind: k8sdns.Headless}
	if rng.Intn(4) == 0 {
		s.svc.Kind = k8sdns.ExternalName
	}
	for p := range rng.Intn(3) {
		s.svc.Ports = append(s.svc.Ports, k8sdns.Port{Name: fmt.Sprintf("p%d", p), Protocol: "TCP", Port: int32(80 + rng.Intn(3))})
	}
	if rng.Intn(2) == 0 {
		s.nodePorts = make([]int32, len(s.svc.Ports))
		for j := range s.nodePorts {
			s.nodePorts[j] = int32(30000 + rng.Intn(3))
		}
	}
	if o, ok, _ := st.svcs.GetByKey(ns + "/" + name); ok && rng.Intn(6) == 0 {
		_ = st.svcs.Delete(o)
	} else {
		_ = st.svcs.Update(s) // adds it again when deleted
	}
	return ns + "/" + name
}

// forgetMappings drops the orch mapping each stored Service keeps.
func forgetMappings(st stores) {
	for _, o := range st.svcs.List() {
		o.(*kService).orch.Store(nil)
	}
}

// genSliceChange turns one endpoint of a Service's slice ready or
// unready, or moves it to another node, or deletes the slice, or adds a
// new one (of IPv4, IPv6 or FQDN addresses, also of a Service's name in
// capitals), in the store, and returns the label's name as the dirty set
// marks it.
func genSliceChange(rng *rand.Rand, st stores) string {
	i := rng.Intn(20)
	id := genNamespace(i) + "/" + fmt.Sprintf("svc-%d", i)
	if rng.Intn(4) == 0 {
		id = genNamespace(i) + "/" + mislabel(fmt.Sprintf("svc-%d", i))
	}
	sls := st.slicesOf(id)
	if len(sls) == 0 || rng.Intn(10) == 0 {
		genNewSlice(rng, st, id)
		return id
	}
	old := sls[rng.Intn(len(sls))]
	if rng.Intn(10) == 0 {
		_ = st.slices.Delete(old)
		return id
	}
	n := &kSlice{kMeta: old.kMeta, sl: k8sdns.Slice{Namespace: old.sl.Namespace, Name: old.sl.Name, Service: old.sl.Service,
		Type: old.sl.Type, Ports: old.sl.Ports}}
	if rng.Intn(5) == 0 {
		n.sl.Ports = genPorts[rng.Intn(len(genPorts))]
	}
	j := rng.Intn(len(old.sl.Endpoints))
	for i := range old.sl.Endpoints {
		e := &old.sl.Endpoints[i]
		spec := k8sdns.EndpointSpec{Addresses: []string{old.sl.Address(i, 0)}, NodeName: e.Node(), Ready: e.Ready}
		if i == j {
			if rng.Intn(2) == 0 {
				spec.Ready = k8sdns.True + k8sdns.False - spec.Ready
			} else {
				spec.NodeName = fmt.Sprintf("node-%d", rng.Intn(genNodes+1))
			}
		}
		_ = n.sl.Add(spec)
	}
	n.sl.Compact()
	_ = st.slices.Update(n)
	return id
}

// genNewSlice adds a slice labelled id ("namespace/name") of one to three
// endpoints: IPv4, IPv6 or FQDN addresses (an FQDN the orch model cannot
// answer with now and then), ready or not, on a node or on none.
func genNewSlice(rng *rand.Rand, st stores, id string) {
	ns, name, _ := strings.Cut(id, "/")
	sl := &kSlice{kMeta: kMeta{Name: fmt.Sprintf("%s-n%d", strings.ToLower(name), rng.Intn(1000)), Namespace: ns, ResourceVersion: fmt.Sprint(rng.Int())}}
	sl.sl = k8sdns.Slice{Namespace: ns, Name: sl.Name, Service: name, Type: []k8sdns.AddressType{k8sdns.IPv4, k8sdns.IPv6, k8sdns.FQDN}[rng.Intn(3)],
		Ports: genPorts[rng.Intn(len(genPorts))]}
	for range 1 + rng.Intn(3) {
		spec := k8sdns.EndpointSpec{Ready: []k8sdns.Condition{k8sdns.True, k8sdns.False, k8sdns.Unset}[rng.Intn(3)]}
		if rng.Intn(4) > 0 {
			spec.NodeName = fmt.Sprintf("node-%d", rng.Intn(genNodes+1))
		}
		switch sl.sl.Type {
		case k8sdns.IPv4:
			spec.Addresses = []string{netip.AddrFrom4([4]byte{10, 101, byte(rng.Intn(4)), byte(rng.Intn(256))}).String()}
		case k8sdns.IPv6:
			spec.Addresses = []string{netip.AddrFrom16([16]byte{0: 0xfd, 15: byte(rng.Intn(256))}).String()}
		default:
			spec.Addresses = []string{[...]string{"a.example", "b.example", "c.example.", "x", "10.1.2.3", "a_b.example"}[rng.Intn(6)]} // the last two: none the orch model answers with
		}
		_ = sl.sl.Add(spec)
	}
	sl.sl.Compact()
	_ = st.slices.Update(sl) // adds it, or replaces a slice of that name
}

// taskList is every task of st but its ID (the snapshot's compact form
// numbers them anew), sorted.
func taskList(st *orch.State) []string {
	out := make([]string, len(st.Tasks))
	for i, t := range st.Tasks {
		out[i] = fmt.Sprintf("%s node=%s addr=%s %s/%s ports=%v", t.ServiceID, t.NodeID, t.Address, t.DesiredStatus, t.ActualStatus, t.Ports)
	}
	slices.Sort(out)
	return out
}

// listing is the table's listing (orch.List), every service.
func listing(t *testing.T, tbl *orch.Table) string {
	w := jsonw.Appender(nil)
	if _, err := orch.List(w, tbl, orch.Filter{}); err != nil {
		t.Fatal(err)
	}
	return string(w.Buf)
}

// TestOrchMislabelledSlice: a slice labelled with a Service's name in
// capitals ("Web" beside Service "web") is no slice of that Service, in a
// whole mapping, a patch and the snapshot alike, as the stock plugin
// matches the label; and a change to it leaves Service web and its
// endpoints in the table (the patch once lowercased the label it found no
// Service for and removed Service web).
func TestOrchMislabelledSlice(t *testing.T) {
	zones := []string{"cluster.local."}
	st := newStores()
	_ = st.nodes.Add(&kNode{kMeta: kMeta{Name: "node-0", ResourceVersion: "1"}, addresses: [nodeAddressTypes]string{"10.0.0.1"}})
	s := &kService{kMeta: kMeta{Name: "web", Namespace: "ns", ResourceVersion: "1"}}
	s.svc = k8sdns.Service{Namespace: "ns", Name: "web", Kind: k8sdns.Headless, Ports: []k8sdns.Port{{Name: "http", Protocol: "TCP", Port: 80}}}
	_ = st.svcs.Add(s)
	slice := func(name, label, addr string) *kSlice {
		sl := &kSlice{kMeta: kMeta{Name: name, Namespace: "ns", ResourceVersion: "1"}}
		sl.sl = k8sdns.Slice{Namespace: "ns", Name: name, Service: label, Type: k8sdns.IPv4, Ports: genPorts[0]}
		_ = sl.sl.Add(k8sdns.EndpointSpec{Ready: k8sdns.True, NodeName: "node-0", Addresses: []string{addr}})
		sl.sl.Compact()
		return sl
	}
	_ = st.slices.Add(slice("web-a", "web", "10.100.0.1"))
	_ = st.slices.Add(slice("web-b", "Web", "10.100.0.2"))
	for i, endpointMode := range []bool{false, true} {
		m := &orchModel{}
		whole := m.whole(st).(*orch.State)
		if got := taskList(whole); len(got) != 1 || !strings.Contains(got[0], "addr=10.100.0.1") {
			t.Fatalf("endpoint=%v: the whole mapping's tasks %q, want web-a's alone", endpointMode, got)
		}
		tbl := orch.BuildTable(whole, zones, false, endpointMode, nil)
		want := listing(t, tbl)
		_ = st.slices.Update(slice("web-b", "Web", fmt.Sprintf("10.100.0.%d", 3+i))) // a change to the mislabelled slice, each pass its own
		p := m.patch(st, changes{names: map[string]bool{"ns/Web": true}}, nil).(*orch.Patch)
		if len(p.Removed) > 0 {
			t.Errorf("endpoint=%v: the patch removes %v", endpointMode, p.Removed)
		}
		if got := listing(t, tbl.Patched(p, zones, false, endpointMode, nil)); got != want {
			t.Errorf("endpoint=%v: after the mislabelled slice's change\n%s\nwant\n%s", endpointMode, got, want)
		}
		var buf bytes.Buffer
		if err := m.snapshot(&buf, st); err != nil {
			t.Fatal(err)
		}
		loaded, err := orch.DecodeSnapshot(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if got, w := taskList(loaded), taskList(whole); !slices.Equal(got, w) {
			t.Errorf("endpoint=%v: the snapshot's tasks %q, want %q", endpointMode, got, w)
		}
	}
}

// TestKnownNodes: a patch's few known nodes (looked through) and a whole
// mapping's many (a map) answer alike.
func TestKnownNodes(t *testing.T) {
	for _, n := range []int{0, 1, fewKnown, fewKnown + 1, 500} {
		k := newKnownNodes(n)
		if (k.many != nil) != (n > fewKnown) {
			t.Fatalf("%d nodes: many is %v", n, k.many != nil)
		}
		for i := range n {
			if i%3 != 0 {
				k.add(unique.Make(fmt.Sprintf("node-%d", i)), fmt.Sprintf("name-%d", i))
			}
		}
		for i := range n + 2 {
			want := ""
			if i < n && i%3 != 0 {
				want = fmt.Sprintf("name-%d", i)
			}
			if got := k.name(unique.Make(fmt.Sprintf("node-%d", i))); got != want {
				t.Fatalf("%d nodes: node-%d is %q, want %q", n, i, got, want)
			}
		}
	}
}

// TestLowerProtocol: lowerProtocol is strings.ToLower, the API's three
// protocols included.
func TestLowerProtocol(t *testing.T) {
	for _, p := range []string{"TCP", "UDP", "SCTP", "tcp", "udp", "sctp", "Tcp", "", "HTTP", "SCTp"} {
		if got, want := lowerProtocol(p), strings.ToLower(p); got != want {
			t.Errorf("lowerProtocol(%q) = %q, want %q", p, got, want)
		}
	}
}
