package kubesource

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// TestOnNodesIndex: the Services onNodes finds through the slices' node
// index are those a look through every slice finds, while random slices
// are added, moved between nodes and Services, and deleted.
func TestOnNodesIndex(t *testing.T) {
	for seed := range uint64(3) {
		r := rand.New(rand.NewPCG(seed, 4))
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{byService: sliceService, byNode: sliceNodes})
		st := stores{slices: idx}
		slice := func(i int) any {
			var eps []discoveryv1.Endpoint
			for j := range r.IntN(5) {
				node := fmt.Sprintf("n%d", r.IntN(8))
				if r.IntN(6) == 0 {
					node = "" // on no node
				}
				eps = append(eps, kubefix.EP(fmt.Sprintf("10.1.%d.%d", i, j+1), node))
			}
			svc := fmt.Sprintf("svc%d", r.IntN(12))
			if r.IntN(10) == 0 {
				svc = "" // no Service label
			}
			x, _ := transformSlice(nil, false)(kubefix.Slice("ns", fmt.Sprintf("sl%d", i), svc, discoveryv1.AddressTypeIPv4, eps...))
			return x
		}
		for step := range 200 {
			i := r.IntN(40)
			var err error
			if r.IntN(5) == 0 {
				err = idx.Delete(slice(i))
			} else {
				err = idx.Update(slice(i))
			}
			if err != nil {
				t.Fatal(err)
			}
			nodes := map[string]bool{fmt.Sprintf("n%d", r.IntN(9)): true, fmt.Sprintf("n%d", r.IntN(9)): true}
			got, want := map[string]bool{}, map[string]bool{}
			onNodes(st, nodes, got)
			scanNodes(st, nodes, want)
			if !maps.Equal(got, want) {
				t.Fatalf("seed %d step %d: nodes %v: the index finds %v, a look through the slices %v", seed, step, nodes, got, want)
			}
		}
	}
}
