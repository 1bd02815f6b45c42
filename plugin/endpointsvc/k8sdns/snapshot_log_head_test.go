package k8sdns

import (
	"encoding/json"
	"math/rand"
	"net/netip"
	"testing"
)

// TestPatchRecordHeadAsJSON: the head AppendPatchRecord appends by hand
// is byte for byte what encoding/json writes for the same logHead (the
// form it replaced), for generated patches: origins and namespaces with
// characters JSON escapes, namespace lists unset, empty or not, pod
// addresses of both families with and without namespaces.
func TestPatchRecordHeadAsJSON(t *testing.T) {
	words := []string{"", "a", "shop", "<b>&\"q\"", "ünï", "x\\y", "tab\there"}
	rng := rand.New(rand.NewSource(1))
	pick := func() []string {
		if rng.Intn(3) == 0 {
			return nil
		}
		out := []string{}
		for range rng.Intn(4) {
			out = append(out, words[rng.Intn(len(words))])
		}
		return out
	}
	for i := range 500 {
		p := &Patch{Origin: words[rng.Intn(len(words))], SetNamespaces: rng.Intn(2) == 0, Namespaces: pick()}
		for range rng.Intn(3) {
			a := netip.AddrFrom4([4]byte{10, 0, byte(rng.Intn(256)), byte(rng.Intn(256))})
			if rng.Intn(2) == 0 {
				a = netip.AddrFrom16([16]byte{0xfd, 15: byte(rng.Intn(256))})
			}
			p.Pods = append(p.Pods, PodAddr{Addr: a, Namespaces: pick()})
		}
		want := jsonHead(t, p)
		if got := string(AppendPatchRecord(nil, p)); got != want {
			t.Fatalf("patch %d: head\n%s\nwant (encoding/json)\n%s", i, got, want)
		}
	}
}

// jsonHead is p's head as encoding/json writes its logHead.
func jsonHead(t *testing.T, p *Patch) string {
	h := logHead{Patch: 1, Origin: p.Origin}
	if p.SetNamespaces {
		ns := p.Namespaces
		if ns == nil {
			ns = []string{}
		}
		h.Namespaces = &ns
	}
	for _, pa := range p.Pods {
		nss := pa.Namespaces
		if nss == nil {
			nss = []string{}
		}
		h.Pods = append(h.Pods, logPodNS{Addr: pa.Addr.String(), Namespaces: nss})
	}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
