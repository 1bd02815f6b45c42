package virtualconsul

import (
	"bufio"
	"encoding/json"
	"io"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshdns/meshdns/plugin/inspect"
)

// inspected is what the inspect plugin's listing shows of an instance
// beside its table (GET /virtualconsul).
type inspected struct {
	lastSync, lastChange atomic.Int64           // Unix nanoseconds; 0: never
	from                 atomic.Pointer[string] // where the serving table came from: a source, "snapshot", "carried"

	mu       sync.Mutex
	withdraw func() // nil when not registered
}

// served records that the serving table came from from.
func (v *VirtualConsul) served(from string) { v.insp.from.Store(&from) }

// register lists v in inspect's /virtualconsul until unregister.
func (v *VirtualConsul) register() {
	v.insp.mu.Lock()
	defer v.insp.mu.Unlock()
	if v.insp.withdraw == nil {
		v.insp.withdraw = inspect.Register(pluginName, v)
	}
}

func (v *VirtualConsul) unregister() {
	v.insp.mu.Lock()
	defer v.insp.mu.Unlock()
	if v.insp.withdraw != nil {
		v.insp.withdraw()
		v.insp.withdraw = nil
	}
}

// List implements inspect.Lister: the block's zones, servers, source,
// where the serving table came from, its generation, size and
// datacenter, the identity short names expand with, the last sync and
// change, the snapshot's path and age, then every entry (key, addresses,
// ambiguous), streamed from the one table it loaded, in no order.
func (v *VirtualConsul) List(w io.Writer, q url.Values) error {
	if len(q) > 0 {
		return &inspect.BadRequest{Msg: "/virtualconsul takes no filter"}
	}
	t := v.table.Load()
	bw := bufio.NewWriterSize(w, 32<<10)
	head := v.listHead(t)
	b, err := json.Marshal(head)
	if err != nil {
		return err
	}
	bw.Write(b[:len(b)-1]) // the object without its closing brace: the entries follow
	bw.WriteString(`,"entries":[`)
	if t != nil {
		t.listEntries(bw)
	}
	bw.WriteString("\n]}")
	return bw.Flush()
}

// listHead is the listing's object before its entries.
type listHead struct {
	Zones      []string          `json:"zones"`
	Servers    []string          `json:"servers"`
	Source     string            `json:"source"`
	TableFrom  string            `json:"table_from,omitempty"`
	Generation uint64            `json:"generation"`
	Entries    int               `json:"entries_count"`
	Datacenter string            `json:"table_datacenter,omitempty"`
	ShortNames map[string]string `json:"short_names"`
	LastSync   *time.Time        `json:"last_sync"`
	LastChange *time.Time        `json:"last_change"`
	Snapshot   *listSnapshot     `json:"snapshot,omitempty"`
	Remote     string            `json:"remote_listener,omitempty"`
}

type listSnapshot struct {
	Path string   `json:"path"`
	Age  *float64 `json:"age_seconds"` // null: no file yet
}

func (v *VirtualConsul) listHead(t *Table) listHead {
	h := listHead{Servers: v.servers, Source: "none", ShortNames: map[string]string{"namespace": v.ns, "partition": v.ap, "datacenter": v.dc}}
	for _, z := range v.zones {
		h.Zones = append(h.Zones, z.Zone)
	}
	switch {
	case v.src != nil:
		h.Source = v.src.Name()
	case v.remote != nil:
		h.Source, h.Remote = "envoy", v.remote.address
	}
	if f := v.insp.from.Load(); f != nil {
		h.TableFrom = *f
	}
	if t != nil {
		h.Generation, h.Entries, h.Datacenter = t.Generation(), t.Len(), t.dc
		if !v.dcSet && t.dc != "" {
			h.ShortNames["datacenter"] = t.dc
		}
	}
	stamp := func(ns int64) *time.Time {
		if ns == 0 {
			return nil
		}
		s := time.Unix(0, ns).UTC()
		return &s
	}
	h.LastSync, h.LastChange = stamp(v.insp.lastSync.Load()), stamp(v.insp.lastChange.Load())
	if v.snapshot != "" {
		h.Snapshot = &listSnapshot{Path: v.snapshot}
		if st, err := os.Stat(v.snapshot); err == nil {
			age := time.Since(st.ModTime()).Seconds()
			h.Snapshot.Age = &age
		}
	}
	return h
}

// listEntries writes every entry of t as a JSON object, one a line,
// without allocating per entry beyond the ambiguous ones' addresses.
func (t *Table) listEntries(bw *bufio.Writer) {
	var buf []byte
	first := true
	for key, i := range t.index {
		buf = buf[:0]
		if !first {
			buf = append(buf, ',')
		}
		first = false
		// keys hold only [a-z0-9._-]: no JSON escaping needed.
		buf = append(buf, "\n{\"key\":\""...)
		buf = append(buf, key...)
		buf = append(buf, "\",\"addresses\":["...)
		v := &t.vips[i]
		switch v.fam {
		case fam4:
			buf = appendAddr(buf, netip.AddrFrom4([4]byte(v.ip[:4])), false)
		case fam6:
			buf = appendAddr(buf, netip.AddrFrom16(v.ip), false)
		case famDual:
			buf = appendAddr(buf, netip.AddrFrom4([4]byte(v.ip[:4])), false)
			buf = appendAddr(buf, netip.AddrFrom16(t.dual[i]), true)
		default:
			for j, a := range t.multi[i] {
				buf = appendAddr(buf, a, j > 0)
			}
		}
		buf = append(buf, "],\"ambiguous\":"...)
		buf = strconv.AppendBool(buf, v.fam == famAmbiguous)
		buf = append(buf, '}')
		bw.Write(buf)
	}
}

func appendAddr(buf []byte, a netip.Addr, comma bool) []byte {
	if comma {
		buf = append(buf, ',')
	}
	buf = append(buf, '"')
	buf = a.AppendTo(buf)
	return append(buf, '"')
}
