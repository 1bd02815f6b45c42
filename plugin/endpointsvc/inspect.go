package endpointsvc

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/meshdns/meshdns/plugin/endpointsvc/k8sdns"
	"github.com/meshdns/meshdns/plugin/endpointsvc/orch"
	"github.com/meshdns/meshdns/plugin/inspect"
	"github.com/meshdns/meshdns/plugin/pkg/jsonw"
)

// listHead is the listing's object before its services.
type listHead struct {
	Zones      []string      `json:"zones"`
	Schema     string        `json:"schema"`
	Source     string        `json:"source"`
	Generation uint32        `json:"generation"`                  // the table's SOA serial; 0: no table yet
	Age        *float64      `json:"table_age_seconds,omitempty"` // how far the table is behind its source; none: no table yet
	Services   int           `json:"services_count"`
	Endpoints  int           `json:"endpoints_count"`
	Snapshot   *listSnapshot `json:"snapshot,omitempty"`
	Filter     *listFilter   `json:"filter,omitempty"`
}

type listSnapshot struct {
	Path string   `json:"path"`
	Age  *float64 `json:"age_seconds"` // null: no file yet
}

type listFilter struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
}

// List implements inspect.Lister: the block's zones, schema and source,
// the served table's generation (its SOA serial: higher for every later
// table of the instance, carried over a reload) and figures, then the
// Services the filters (?namespace=, ?name=) select as the table answers
// them (after the predicate), streamed from the one table it loaded, in
// the table's order (namespace, name).
func (e *Endpointsvc) List(w io.Writer, q url.Values) error {
	f, err := listFilterOf(q)
	if err != nil {
		return err
	}
	t := e.tbl.Load()
	b, err := json.Marshal(e.listHead(t, f))
	if err != nil {
		return err
	}
	jw := jsonw.NewWriter(w)
	jw.Buf = append(jw.Buf, b[:len(b)-1]...) // the object without its closing brace: the services follow
	jw.Buf = append(jw.Buf, ",\"services\":[\n"...)
	if t != nil {
		switch m := t.model.(type) {
		case *orch.Table:
			_, err = orch.List(jw, m, orch.Filter{Namespace: f.Namespace, Name: f.Name})
		case *k8sdns.Table:
			_, err = e.schema.(*dnsSchema).srv.List(jw, m, k8sdns.Filter{Namespace: f.Namespace, Name: f.Name})
		}
		if err != nil {
			return err
		}
	}
	jw.Buf = append(jw.Buf, "\n]}"...)
	return jw.Flush(true)
}

// listFilterOf reads the filters of a listing: namespace and name, once
// each, lowercased as the tables key them; anything else is refused.
func listFilterOf(q url.Values) (listFilter, error) {
	var f listFilter
	for k, v := range q {
		if len(v) != 1 {
			return f, &inspect.BadRequest{Msg: fmt.Sprintf("/endpointsvc: ?%s= given %d times, want once", k, len(v))}
		}
		switch k {
		case "namespace":
			f.Namespace = strings.ToLower(v[0])
		case "name":
			f.Name = strings.ToLower(v[0])
		default:
			return f, &inspect.BadRequest{Msg: fmt.Sprintf("/endpointsvc takes ?namespace= and ?name=, not ?%s=", k)}
		}
	}
	return f, nil
}

func (e *Endpointsvc) listHead(t *table, f listFilter) listHead {
	h := listHead{Zones: e.Zones, Schema: e.schema.name(), Source: "none"}
	if e.source != nil {
		h.Source = e.source.Name()
	}
	if t != nil {
		h.Generation, h.Services, h.Endpoints = t.serial, t.model.Services(), t.model.Endpoints()
		age := e.tableAge().Seconds()
		h.Age = &age
	}
	if e.snapshotPath != "" {
		h.Snapshot = &listSnapshot{Path: e.snapshotPath}
		if st, err := os.Stat(e.snapshotPath); err == nil {
			age := time.Since(st.ModTime()).Seconds()
			h.Snapshot.Age = &age
		}
	}
	if f != (listFilter{}) {
		h.Filter = &f
	}
	return h
}
