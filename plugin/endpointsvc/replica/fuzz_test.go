package replica

import (
	"bytes"
	"testing"

	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
)

// FuzzLines: any sequence of lines from a leader - valid states, cut or
// broken ones, garbage - never panics the follower, and whatever it
// hands the sink builds a table (a whole state) or patches the served one.
func FuzzLines(f *testing.F) {
	epoch := "0123456789abcdef"
	join := func(ls []string) []byte { return []byte(ls[0] + ls[1] + ls[2] + ls[3]) }
	f.Add(join(smallState(epoch, 1, "10.96.0.1")), "", uint64(0))
	f.Add(append(join(smallState(epoch, 1, "10.96.0.1")), `{"namespace":"shop","name":"web"}`+"\n"+`{"gen":2,"synced":true}`+"\n"...), "", uint64(0))
	f.Add([]byte(`{"epoch":"`+epoch+`","gen":3,"full":false}`+"\n"+`{"namespaces":["a"]}`+"\n"+`{"gen":3,"synced":true}`+"\n"+`{"gen":3}`+"\n"), epoch, uint64(2))
	f.Add([]byte(`{"gen":1}`+"\n"+`{}`+"\n"+`{"namespace":"a","name":"b","slices":[{"namespace":"a","name":"s","service":"b","type":"IPv6","addresses":[["fd00::1"]],"conditions":["-n-"]}]}`+"\n"), epoch, uint64(1))
	f.Add([]byte(string(appendHeader(nil, epoch, 1, true, 1, 0, 0))+`{"pods":{"10.0.0.1":["a","a"],"fd00::1":["b"]}}`+"\n"+`{"gen":1,"synced":true}`+"\n"+
		`{"pods":{"10.0.0.1":[],"::ffff:10.0.0.3":["c"]}}`+"\n"+`{"gen":2,"synced":true}`+"\n"), "", uint64(0))
	f.Fuzz(func(t *testing.T, stream []byte, askEpoch string, askGen uint64) {
		sink := &fakeSink{}
		if askEpoch != "" {
			sink.tbl.Store(k8sdns.Build(&k8sdns.Cluster{Origin: origin(askEpoch, askGen)}))
		}
		a := &applier{sink: sink, served: servedTable(sink), stats: &FollowerStats{}, zone: "fuzz.", askEpoch: askEpoch, askGen: askGen}
		for _, l := range bytes.Split(stream, []byte("\n")) {
			if a.line(l) != nil {
				break
			}
		}
		if tbl := sink.tbl.Load(); tbl != nil {
			_ = tbl.Describe()
		}
	})
}
