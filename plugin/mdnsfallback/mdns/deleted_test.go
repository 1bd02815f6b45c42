package mdns

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Item 2 of issue 29: deleted means deleted.

// wireLog records what the responder writes, in the order it writes it
// (the sent hook runs under sendMu).
type wireLog struct {
	mu   sync.Mutex
	pkts []*dns.Msg
}

func (w *wireLog) add(o Packet) { w.mu.Lock(); w.pkts = append(w.pkts, o.msg); w.mu.Unlock() }

// last returns the TTL of the last record about (name, addr) on the wire,
// and whether there was one.
func (w *wireLog) last(name string, addr netip.Addr) (uint32, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.pkts) - 1; i >= 0; i-- {
		for j := len(w.pkts[i].Answer) - 1; j >= 0; j-- {
			rr := w.pkts[i].Answer[j]
			if a, ok := rr.(*dns.A); ok && a.Hdr.Name == name && a.A.String() == addr.String() {
				return rr.Header().Ttl, true
			}
		}
	}
	return 0, false
}

// TestReplyAfterDeleteCancelled is the case: a QM query is
// answered (the reply waits 20–120 ms, RFC 6762 §6), and the record is
// deleted 5 ms later. The goodbye goes out, the reply never does.
func TestReplyAfterDeleteCancelled(t *testing.T) {
	p, db := newTestNode(nil)
	put(t, db, "c1", "10.32.0.1", "web.weave.local", 0)
	r := testResponder(p)
	defer r.stopAnnouncements()
	var w wireLog
	r.sent = w.add
	p.resp.Store(r)
	time.Sleep(50 * time.Millisecond) // the first announcement is out
	out := r.handle(pack(t, question("web.weave.local.", dns.TypeA, dns.ClassINET)), peer, testIfIndex, time.Now())
	if len(out) != 1 || out[0].delay < sharedDelayMin {
		t.Fatalf("QM reply: %+v", out)
	}
	r.send(out[0])
	time.Sleep(5 * time.Millisecond)
	db.DeleteID("c1")
	time.Sleep(sharedDelayMax + 30*time.Millisecond)
	if ttl, ok := w.last("web.weave.local.", ip("10.32.0.1")); !ok || ttl != 0 {
		t.Fatalf("the last word on the wire about the deleted record has TTL %d (%v), want the goodbye", ttl, ok)
	}
}

// TestGoodbyeIsTheLastWord interleaves, for a few seeds, puts and deletes
// of a small pool of records with QM, QU and legacy queries for them from
// three goroutines, the multicast replies waiting their 20–120 ms. When
// everything is out, the last record on the wire about each pool record
// says what the database says: a goodbye (TTL 0) for one it no longer
// holds, a positive TTL for one it holds. Without building replies when
// they are sent, a reply read before a delete lands after its goodbye.
func TestGoodbyeIsTheLastWord(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { t.Parallel(); goodbyeLastWord(t, seed) })
	}
}

func goodbyeLastWord(t *testing.T, seed uint64) {
	p, db := newTestNode(nil)
	r := testResponder(p)
	var w wireLog
	r.sent = w.add
	p.resp.Store(r)
	type rec struct {
		id, name string
		addr     netip.Addr
	}
	var pool []rec
	for i := range 6 {
		pool = append(pool, rec{fmt.Sprintf("c%d", i%3), fmt.Sprintf("n%d.weave.local.", i%2), netip.AddrFrom4([4]byte{10, 32, 0, byte(i + 1)})})
	}
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for range 150 {
				x := pool[rng.IntN(len(pool))]
				switch rng.IntN(5) {
				case 0:
					put(t, db, x.id, x.addr.String(), x.name, 0)
				case 1:
					db.DeleteIDIP(x.id, x.addr)
				default:
					class, src := uint16(dns.ClassINET), netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 250, 0, byte(2 + rng.IntN(200))}), mdnsPort)
					switch rng.IntN(3) {
					case 1:
						class |= quBit
					case 2:
						src = netip.AddrPortFrom(src.Addr(), 40000)
					}
					for _, o := range r.handle(pack(t, question(x.name, dns.TypeA, class)), src, testIfIndex, time.Now()) {
						r.send(o)
					}
				}
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
			}
		}()
	}
	wg.Wait()
	// The last replies are out, and the announcements of the last puts
	// (within the once-a-second limit of their records).
	time.Sleep(mcastInterval + sharedDelayMax + 100*time.Millisecond)
	defer r.stopAnnouncements()
	for _, x := range pool {
		ttl, said := w.last(x.name, x.addr)
		e := db.Lookup(x.name)
		held := e != nil && e.Holds(x.addr)
		switch {
		case held && said && ttl == 0:
			t.Errorf("%s %s is held, but the last word on the wire is a goodbye", x.name, x.addr)
		case !held && said && ttl != 0:
			t.Errorf("%s %s was deleted, but the last word on the wire is TTL %d", x.name, x.addr, ttl)
		}
	}
}
