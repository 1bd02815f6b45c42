package endpointsvc

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/metadata"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"

	"github.com/meshdns/meshdns/internal/clustergen"
	"github.com/meshdns/meshdns/plugin/endpointsvc/internal/kubefix"

	"github.com/miekg/dns"
)

// metadataOf is what provider p sets for a question from client addr, as
// "key=value" lines, sorted.
func metadataOf(p metadata.Provider, q clustergen.Question, addr string) string {
	m := new(dns.Msg)
	m.SetQuestion(q.Name, q.Type)
	ctx := metadata.ContextWithMetadata(context.Background())
	ctx = p.Metadata(ctx, request.Request{W: &test.ResponseWriter{RemoteIP: addr}, Req: m})
	var out []string
	for k, f := range metadata.ValueFuncs(ctx) {
		out = append(out, k+"="+f())
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// TestMetadataAgainstStock: with pods verified, every generated question
// asked from every client address (and one that is no Pod's) gets the
// stock plugin's metadata keys and values, but kubernetes/client-pod-name
// and kubernetes/client-label/*, which the table does not keep (its pod
// index has each address's namespaces only); for an address of Pods in
// several namespaces, client-namespace is the first (the stock plugin's
// any one).
func TestMetadataAgainstStock(t *testing.T) {
	const opts = "pods verified"
	for _, seed := range genSeeds(t, 2) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			c, cfg := podCluster(seed)
			ours := oursWith(t, newFakeCluster(t, c), opts)
			stock := stockWith(t, c, opts)
			qs := clustergen.Questions(c, cfg, rand.New(rand.NewSource(seed)))
			kubefix.Eventually(t, func() string { return diffOptions(c, qs, ours, opts) })
			addrs := append(c.ClientAddrs(), "192.0.2.200")
			bad, keys, clients := 0, 0, 0
			for i, q := range qs {
				addr := addrs[i%len(addrs)]
				want := dropPodKeys(metadataOf(stock, q, addr))
				got := metadataOf(ours, q, addr)
				if nss := podNamespaces(c, addr); len(nss) > 1 {
					want = strings.Replace(want, "client-namespace="+stockNamespace(want), "client-namespace="+nss[0], 1)
				}
				keys += strings.Count(got, "=")
				clients += strings.Count(got, "client-namespace=")
				if got != want {
					if bad++; bad <= 10 {
						t.Errorf("%s from %s:\n  stock: %s\n  ours:  %s", q, addr, want, got)
					}
				}
			}
			if keys < len(qs) || clients < len(qs)/4 {
				t.Fatalf("only %d keys (%d client namespaces) set for %d questions", keys, clients, len(qs))
			}
			t.Logf("%d questions, %d keys, %d client namespaces", len(qs), keys, clients)
		})
	}
}

// dropPodKeys leaves out the keys of the client Pod's name and labels.
func dropPodKeys(s string) string {
	f := strings.Fields(s)
	f = slices.DeleteFunc(f, func(kv string) bool {
		return strings.HasPrefix(kv, "kubernetes/client-pod-name=") || strings.HasPrefix(kv, "kubernetes/client-label/")
	})
	return strings.Join(f, " ")
}

// stockNamespace is the client-namespace value in a metadata line.
func stockNamespace(s string) string {
	for _, kv := range strings.Fields(s) {
		if v, ok := strings.CutPrefix(kv, "kubernetes/client-namespace="); ok {
			return v
		}
	}
	return ""
}
