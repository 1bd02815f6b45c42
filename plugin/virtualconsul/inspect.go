package virtualconsul

import (
	"bufio"
	"encoding/json"
	"io"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshdns/meshdns/plugin/inspect"
	"github.com/meshdns/meshdns/plugin/virtualconsul/table"
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
		t.ListEntries(bw)
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

func (v *VirtualConsul) listHead(t *table.Table) listHead {
	h := listHead{Servers: v.servers, Source: "none", ShortNames: map[string]string{"namespace": v.ns, "partition": v.ap, "datacenter": v.dc}}
	for _, z := range v.zones {
		h.Zones = append(h.Zones, z.Zone)
	}
	switch {
	case v.src != nil:
		h.Source = v.src.Name()
	case v.remote != nil:
		h.Source, h.Remote = "envoy", v.remote.Address()
	}
	if f := v.insp.from.Load(); f != nil {
		h.TableFrom = *f
	}
	if t != nil {
		h.Generation, h.Entries, h.Datacenter = t.Generation(), t.Len(), t.Datacenter()
		if !v.dcSet && t.Datacenter() != "" {
			h.ShortNames["datacenter"] = t.Datacenter()
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
