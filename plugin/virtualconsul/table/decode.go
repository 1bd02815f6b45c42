package table

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// VirtualDNSListener is the prefix of the name of the listener that
// carries the table: Consul's virtual_dns listener.
const VirtualDNSListener = "virtual_dns"

// Decode reads a table in any shape an operator already has and adds its
// entries to b:
//
//   - the virtual_domains array as Envoy's config_dump shows it:
//     [{"name": "...", "endpoint": {"address_list": {"address": ["240.0.0.1"]}}}]
//   - the inline_dns_table object: {"virtual_domains": [...]}
//   - a whole Envoy admin config_dump: the table of the first listener whose
//     name starts with "virtual_dns".
//
// Both proto field spellings are accepted (virtual_domains / virtualDomains,
// address_list / addressList). The array shapes are decoded as a stream, one
// entry at a time, so a table of millions of entries never sits in memory
// twice. The first bad entry stops decoding with an error that names it.
func Decode(r io.Reader, b *Builder) error {
	br := bufio.NewReaderSize(r, 64<<10)
	c, err := firstByte(br)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(br)
	switch c {
	case '[':
		if err := decodeDomains(dec, b); err != nil {
			return err
		}
	case '{':
		if err := decodeObject(dec, b); err != nil {
			return err
		}
	default:
		return fmt.Errorf("want a JSON array or object, got %q", c)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the table")
	}
	return nil
}

// firstByte peeks at the first non-space byte of br.
func firstByte(br *bufio.Reader) (byte, error) {
	for {
		c, err := br.ReadByte()
		if err == io.EOF {
			return 0, errors.New("empty table")
		}
		if err != nil {
			return 0, err
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c, br.UnreadByte()
	}
}

// jsonDomain is one element of virtual_domains; fields we do not use
// (answer_ttl, cluster_name, …) are ignored.
type jsonDomain struct {
	Name     string        `json:"name"`
	Endpoint *jsonEndpoint `json:"endpoint"`
}

type jsonEndpoint struct {
	AddressList      *jsonAddressList `json:"address_list"`
	AddressListCamel *jsonAddressList `json:"addressList"`
}

type jsonAddressList struct {
	Address []string `json:"address"`
}

func (d *jsonDomain) entry() Entry {
	e := Entry{Name: d.Name}
	if ep := d.Endpoint; ep != nil {
		if ep.AddressList != nil {
			e.Addresses = ep.AddressList.Address
		} else if ep.AddressListCamel != nil {
			e.Addresses = ep.AddressListCamel.Address
		}
	}
	return e
}

// decodeDomains streams a virtual_domains array into b.
func decodeDomains(dec *json.Decoder, b *Builder) error {
	if tok, err := dec.Token(); err != nil {
		return fmt.Errorf("virtual_domains: %w", err)
	} else if tok != json.Delim('[') {
		return fmt.Errorf("virtual_domains: want an array, got %v", tok)
	}
	for n := b.n + 1; dec.More(); n++ {
		var d jsonDomain
		if err := dec.Decode(&d); err != nil {
			return fmt.Errorf("entry %d: %w", n, err)
		}
		if err := b.Add(d.entry()); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing ]
		return fmt.Errorf("virtual_domains: %w", err)
	}
	return nil
}

// decodeObject reads an inline_dns_table object or a config_dump.
func decodeObject(dec *json.Decoder, b *Builder) error {
	if _, err := dec.Token(); err != nil { // {
		return err
	}
	found := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		switch key {
		case "virtual_domains", "virtualDomains":
			if found {
				return errors.New("virtual_domains given twice")
			}
			found = true
			if err := decodeDomains(dec, b); err != nil {
				return err
			}
		case "datacenter":
			// meshdns's own field (a snapshot of the consul source): the
			// agent's datacenter, which short names expand with.
			var dc string
			if err := dec.Decode(&dc); err != nil {
				return fmt.Errorf("datacenter: %w", err)
			}
			if dc = strings.ToLower(dc); dc != "" && !ValidIdentity(dc) {
				return fmt.Errorf("datacenter: invalid name %q", dc)
			}
			b.SetDatacenter(dc)
		case "configs":
			if found {
				return errors.New("virtual_domains given twice")
			}
			found = true
			if err := decodeConfigDump(dec, b); err != nil {
				return fmt.Errorf("config_dump: %w", err)
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil { // }
		return err
	}
	if !found {
		return errors.New("no virtual_domains array and no config_dump configs")
	}
	return nil
}

// decodeConfigDump reads an Envoy config_dump's configs array, one config
// at a time: only the listener dumps are decoded, every other config
// (clusters, routes, secrets: the bulk of a large dump) is skipped token by
// token, never held. The table is that of the listener named virtual_dns…,
// chosen the same way every time: a static listener first, else the active
// state of a dynamic one; a warming or draining listener (a version Envoy
// is not, or no longer, serving) never.
func decodeConfigDump(dec *json.Decoder, b *Builder) error {
	l, err := virtualDNSListenerOf(dec)
	if err != nil {
		return err
	}
	var listener any
	if err := json.Unmarshal(l, &listener); err != nil {
		return err
	}
	domains, ok := findKey(listener, "inline_dns_table", "inlineDnsTable")
	if !ok {
		return errors.New("listener virtual_dns* has no inline_dns_table")
	}
	table, _ := domains.(map[string]any)
	vd, ok := findKey(table, "virtual_domains", "virtualDomains")
	if !ok {
		vd = []any{} // an empty DNS table
	}
	raw, err := json.Marshal(vd)
	if err != nil {
		return err
	}
	return decodeDomains(json.NewDecoder(bytes.NewReader(raw)), b)
}

// virtualDNSListenerOf reads a config_dump's configs array and returns the first
// static listener named virtual_dns…, else the first active dynamic one.
func virtualDNSListenerOf(dec *json.Decoder) (json.RawMessage, error) {
	if err := expectDelim(dec, '['); err != nil {
		return nil, err
	}
	var static, active json.RawMessage
	for dec.More() {
		if err := expectDelim(dec, '{'); err != nil {
			return nil, err
		}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil, err
			}
			switch tok {
			case "static_listeners", "staticListeners":
				err = staticListener(dec, &static)
			case "dynamic_listeners", "dynamicListeners":
				err = activeListener(dec, &active)
			default:
				err = skipValue(dec)
			}
			if err != nil {
				return nil, err
			}
		}
		if _, err := dec.Token(); err != nil { // }
			return nil, err
		}
	}
	if _, err := dec.Token(); err != nil { // ]
		return nil, err
	}
	if static != nil {
		return static, nil
	}
	if active != nil {
		return active, nil
	}
	return nil, errors.New("no static or active listener named virtual_dns*")
}

// staticListener decodes static_listeners and keeps in *found the first
// named virtual_dns… unless *found is already set.
func staticListener(dec *json.Decoder, found *json.RawMessage) error {
	var ls []struct {
		Listener json.RawMessage `json:"listener"`
	}
	if err := dec.Decode(&ls); err != nil {
		return err
	}
	for _, l := range ls {
		if *found == nil && virtualDNS(l.Listener) {
			*found = l.Listener
		}
	}
	return nil
}

// activeListener decodes dynamic_listeners and keeps in *found the active
// state of the first named virtual_dns… unless *found is already set.
func activeListener(dec *json.Decoder, found *json.RawMessage) error {
	var ls []struct {
		Name   string `json:"name"`
		Active *struct {
			Listener json.RawMessage `json:"listener"`
		} `json:"active_state"`
		ActiveCamel *struct {
			Listener json.RawMessage `json:"listener"`
		} `json:"activeState"`
	}
	if err := dec.Decode(&ls); err != nil {
		return err
	}
	for _, l := range ls {
		if a := cmpOr(l.Active, l.ActiveCamel); *found == nil && a != nil && strings.HasPrefix(l.Name, VirtualDNSListener) {
			*found = a.Listener
		}
	}
	return nil
}

// virtualDNS reports whether the listener l is named virtual_dns….
func virtualDNS(l json.RawMessage) bool {
	var named struct {
		Name string `json:"name"`
	}
	return json.Unmarshal(l, &named) == nil && strings.HasPrefix(named.Name, VirtualDNSListener)
}

func cmpOr[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

// expectDelim reads the next token and fails unless it is d.
func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != d {
		return fmt.Errorf("want %v, found %v", d, tok)
	}
	return nil
}

// skipValue consumes the next JSON value token by token, holding none of
// it.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// findKey returns the value of the first object key under v (depth first)
// that is one of keys.
func findKey(v any, keys ...string) (any, bool) {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range keys {
			if c, ok := x[k]; ok {
				return c, true
			}
		}
		for _, c := range x {
			if r, ok := findKey(c, keys...); ok {
				return r, true
			}
		}
	case []any:
		for _, c := range x {
			if r, ok := findKey(c, keys...); ok {
				return r, true
			}
		}
	}
	return nil, false
}
