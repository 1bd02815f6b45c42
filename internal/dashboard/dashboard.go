package dashboard

import "strings"

// inst is the instance selector every query carries (the $instance
// variable); a query writes it as "I" inside its braces: m{I}.
const inst = `instance=~"$instance"`

// row is a titled group of panels, laid out two or three to a line.
type row struct {
	title  string
	panels []panel
}

// panel is one time series panel: its queries (expr, legend pairs) and unit.
type panel struct {
	title, description, unit string
	queries                  [][2]string
}

// rows is the dashboard's content: per plugin and per source, answers by
// result, latency, table size and age, sync state, replication and mDNS
// traffic.
var rows = []row{
	{"Answers (every server block)", []panel{
		{"Answers by rcode", "Every answer of the process, by rcode (the stock metrics plugin).", "reqps",
			[][2]string{{`sum by (rcode) (rate(coredns_dns_responses_total{I}[$__rate_interval]))`, "{{rcode}}"}}},
		{"Latency", "Time to answer, all server blocks: the 50th and 99th percentiles.", "s",
			[][2]string{
				{`histogram_quantile(0.50, sum by (le) (rate(coredns_dns_request_duration_seconds_bucket{I}[$__rate_interval])))`, "p50"},
				{`histogram_quantile(0.99, sum by (le) (rate(coredns_dns_request_duration_seconds_bucket{I}[$__rate_interval])))`, "p99"}}},
		{"Forward", "Queries forward sends upstream, by upstream and rcode, and failed health checks.", "reqps",
			[][2]string{
				{`sum by (to, rcode) (rate(coredns_proxy_request_duration_seconds_count{I,proxy_name="forward"}[$__rate_interval]))`, "{{to}} {{rcode}}"},
				{`sum by (to) (rate(coredns_proxy_healthcheck_failures_total{I,proxy_name="forward"}[$__rate_interval]))`, "{{to}} health check failures"}}},
	}},
	{"endpointsvc: cluster and orchestrator names", []panel{
		{"Answers by result", "answer, nodata, nxdomain, fallthrough; servfail: no table yet.", "reqps",
			[][2]string{{`sum by (zone, result) (rate(coredns_endpointsvc_requests_total{I}[$__rate_interval]))`, "{{zone}} {{result}}"}}},
		{"Table size", "Services and endpoints in the served table.", "short",
			[][2]string{
				{`max by (instance, zone) (coredns_endpointsvc_services{I})`, "{{instance}} {{zone}} services"},
				{`max by (instance, zone) (coredns_endpointsvc_endpoints{I})`, "{{instance}} {{zone}} endpoints"}}},
		{"Table age", "How far the served table is behind its source: 0 while current (a follower's includes its leader's).", "s",
			[][2]string{{`max by (instance, zone) (coredns_endpointsvc_table_age_seconds{I})`, "{{instance}} {{zone}}"}}},
		{"Syncs by source and result", "updated, patched, unchanged, error.", "ops",
			[][2]string{{`sum by (source, result) (rate(coredns_endpointsvc_syncs_total{I}[$__rate_interval]))`, "{{source}} {{result}}"}}},
		{"Since the last good sync", "Time since each source last synced (changed or not).", "s",
			[][2]string{{`time() - max by (instance, zone, source) (coredns_endpointsvc_last_sync_timestamp_seconds{I})`, "{{instance}} {{zone}} {{source}}"}}},
		{"Snapshot", "Snapshot bytes written and failed writes; 1 while the snapshot holds the last state against an empty sync.", "Bps",
			[][2]string{
				{`sum by (instance, zone) (rate(coredns_endpointsvc_snapshot_written_bytes_total{I}[$__rate_interval]))`, "{{instance}} {{zone}} written"},
				{`sum by (instance, zone) (increase(coredns_endpointsvc_snapshot_write_errors_total{I}[$__rate_interval]))`, "{{instance}} {{zone}} failed writes"},
				{`max by (instance, zone) (coredns_endpointsvc_snapshot_empty_held{I})`, "{{instance}} {{zone}} empty held"}}},
		{"DNS programming latency", "From an EndpointSlice's last-change-trigger-time to the table that answers with the change (the SIG-scalability SLI), on replicas and node-local followers alike: p50 and p99 by service kind. Empty until a slice with a trigger time changes.", "s",
			[][2]string{
				{`histogram_quantile(0.50, sum by (instance, service_kind, le) (rate(coredns_endpointsvc_dns_programming_duration_seconds_bucket{I}[$__rate_interval])))`, "{{instance}} {{service_kind}} p50"},
				{`histogram_quantile(0.99, sum by (instance, service_kind, le) (rate(coredns_endpointsvc_dns_programming_duration_seconds_bucket{I}[$__rate_interval])))`, "{{instance}} {{service_kind}} p99"}}},
	}},
	{"Replication: leaders and node-local followers", []panel{
		{"Streams per leader", "Followers connected to each leader.", "short",
			[][2]string{{`sum by (instance) (coredns_endpointsvc_replicate_streams{I})`, "{{instance}}"}}},
		{"Sent by leaders", "States sent: full (a whole state), resume (changes since the follower's position), change; and bytes.", "Bps",
			[][2]string{
				{`sum by (instance) (rate(coredns_endpointsvc_replicate_sent_bytes_total{I}[$__rate_interval]))`, "{{instance}} bytes"},
				{`sum by (kind) (rate(coredns_endpointsvc_replicate_sent_total{I}[$__rate_interval]))`, "{{kind}} states/s"}}},
		{"Follower lag", "Table age of followers (source replica): the replication lag including the leader's own age.", "s",
			[][2]string{{`max by (instance, zone) (coredns_endpointsvc_table_age_seconds{I}) and on (instance, zone) max by (instance, zone) (coredns_endpointsvc_last_sync_timestamp_seconds{I,source="replica"})`, "{{instance}}"}}},
		{"Follower stream failures and bytes", "Failed stream connections per follower, and bytes received.", "short",
			[][2]string{
				{`sum by (instance) (increase(coredns_endpointsvc_syncs_total{I,source="replica",result="error"}[$__rate_interval]))`, "{{instance}} failures"},
				{`sum by (instance) (rate(coredns_endpointsvc_replica_received_bytes_total{I}[$__rate_interval]))`, "{{instance}} bytes/s"}}},
		{"Published replicas", "Peers each replica finds down and takes out of the DNS Service; failed EndpointSlice writes.", "short",
			[][2]string{
				{`max by (instance, service) (coredns_endpointsvc_publish_peers_down{I})`, "{{instance}} peers down"},
				{`sum by (instance) (increase(coredns_endpointsvc_publish_errors_total{I}[$__rate_interval]))`, "{{instance}} failed writes"}}},
	}},
	{"virtualconsul: Consul virtual names", []panel{
		{"Answers by result", "hit, nodata, miss (forwarded to Consul), passthrough, not_ready, ...", "reqps",
			[][2]string{{`sum by (result) (rate(coredns_virtualconsul_requests_total{I}[$__rate_interval]))`, "{{result}}"}}},
		{"Table size", "Distinct names in the serving table, and entries left out by reason.", "short",
			[][2]string{
				{`max by (instance, zone) (coredns_virtualconsul_entries{I})`, "{{instance}} {{zone}}"},
				{`max by (instance, source, reason) (coredns_virtualconsul_entries_skipped{I}) > 0`, "{{instance}} skipped: {{reason}}"}}},
		{"Source failing", "1 while a source fails and the last good table serves, by reason.", "short",
			[][2]string{{`max by (instance, source, reason) (coredns_virtualconsul_source_failing_reason{I}) > 0`, "{{instance}} {{source}}: {{reason}}"}}},
		{"Table age", "Time since each source was last checked (changed or not) and last changed the table.", "s",
			[][2]string{
				{`time() - max by (instance, zone, source) (coredns_virtualconsul_last_sync_timestamp_seconds{I})`, "{{instance}} {{source}} checked"},
				{`time() - max by (instance, zone, source) (coredns_virtualconsul_last_change_timestamp_seconds{I})`, "{{instance}} {{source}} changed"}}},
		{"Syncs by source and result", "", "ops",
			[][2]string{{`sum by (source, result) (rate(coredns_virtualconsul_syncs_total{I}[$__rate_interval]))`, "{{source}} {{result}}"}}},
	}},
	{"mdnsfallback: the LAN's names", []panel{
		{"Answers by result", "local (held here), cache, mdns (asked the LAN), negative, miss.", "reqps",
			[][2]string{{`sum by (result) (rate(coredns_mdnsfallback_requests_total{I}[$__rate_interval]))`, "{{result}}"}}},
		{"Records and cache", "Records held here, and names learnt from the LAN.", "short",
			[][2]string{
				{`max by (instance) (coredns_mdnsfallback_records{I})`, "{{instance}} records"},
				{`max by (instance) (coredns_mdnsfallback_cache_entries{I})`, "{{instance}} cache"}}},
		{"mDNS traffic", "Queries sent and refused by the budget, responses sent, answers received.", "pps",
			[][2]string{
				{`sum by (instance) (rate(coredns_mdnsfallback_mdns_queries_sent_total{I}[$__rate_interval]))`, "{{instance}} queries"},
				{`sum by (instance, reason) (rate(coredns_mdnsfallback_mdns_queries_limited_total{I}[$__rate_interval]))`, "{{instance}} refused: {{reason}}"},
				{`sum by (instance, kind) (rate(coredns_mdnsfallback_mdns_responses_sent_total{I}[$__rate_interval]))`, "{{instance}} responses: {{kind}}"},
				{`sum by (instance) (rate(coredns_mdnsfallback_mdns_answers_received_total{I}[$__rate_interval]))`, "{{instance}} answers received"}}},
		{"mDNS packets dropped", "Packets and records ignored, by reason (ttl, off_link, unsolicited: what RFC 6762 says to ignore).", "pps",
			[][2]string{{`sum by (reason) (rate(coredns_mdnsfallback_mdns_dropped_total{I}[$__rate_interval]))`, "{{reason}}"}}},
		{"Record API and updater", "Record API requests by code; the container updater's containers and connection.", "short",
			[][2]string{
				{`sum by (code) (rate(coredns_mdnsfallback_api_requests_total{I}[$__rate_interval]))`, "API {{code}}/s"},
				{`max by (instance) (coredns_mdnsfallback_updater_containers{I})`, "{{instance}} containers"},
				{`min by (instance) (coredns_mdnsfallback_updater_connected{I})`, "{{instance}} connected"}}},
	}},
}

// Build returns the dashboard.
func Build() Dashboard {
	ds := &Datasource{Type: "prometheus", UID: "${datasource}"}
	d := Dashboard{
		UID: "meshdns", Title: "meshdns", Tags: []string{"dns", "coredns", "meshdns"},
		Description:   "meshdns per plugin and per source: answers, latency, tables' size and age, sync state, replication, mDNS. Generated by build/dashboard.",
		SchemaVersion: 39, Version: 1, Editable: true, Refresh: "30s",
		Time: TimeRange{From: "now-1h", To: "now"},
		Templating: Templating{List: []Variable{
			{Name: "datasource", Label: "Data source", Type: "datasource", Query: "prometheus", Current: map[string]any{}},
			{Name: "instance", Label: "Instance", Type: "query", Datasource: ds, Refresh: 2,
				Query: map[string]any{"query": "label_values(coredns_dns_requests_total, instance)", "refId": "instance"},
				Multi: true, IncludeAll: true, AllValue: ".*", Current: map[string]any{"text": "All", "value": "$__all"}},
		}},
	}
	id, y := 1, 0
	for _, r := range rows {
		open := false
		d.Panels = append(d.Panels, Panel{ID: id, Type: "row", Title: r.title, GridPos: GridPos{H: 1, W: 24, Y: y}, Collapsed: &open, Panels: []Panel{}})
		id, y = id+1, y+1
		per := 3
		if len(r.panels)%3 != 0 && len(r.panels)%2 == 0 {
			per = 2
		}
		w := 24 / per
		for i, p := range r.panels {
			pn := Panel{ID: id, Type: "timeseries", Title: p.title, Description: p.description, Datasource: ds,
				GridPos:     GridPos{H: 8, W: w, X: (i % per) * w, Y: y + (i/per)*8},
				FieldConfig: &FieldConfig{Defaults: FieldDefaults{Unit: p.unit}, Overrides: []any{}}, Panels: nil}
			for j, q := range p.queries {
				pn.Targets = append(pn.Targets, Target{RefID: string(rune('A' + j)), Expr: Expand(q[0]), LegendFormat: q[1]})
			}
			d.Panels = append(d.Panels, pn)
			id++
		}
		y += (len(r.panels) + per - 1) / per * 8
	}
	return d
}

// Expand puts the instance selector into a query's braces.
func Expand(expr string) string {
	expr = strings.ReplaceAll(expr, "{I}", "{"+inst+"}")
	return strings.ReplaceAll(expr, "{I,", "{"+inst+",")
}
