// Package dashboard builds meshdns's Grafana dashboard from plain Go
// values: the JSON model Grafana imports (schema version 39), written to
// charts/meshdns/files/meshdns-dashboard.json by `go run ./build/dashboard`.
// Only the fields the dashboard uses are modelled; Grafana fills in the
// rest with its defaults on import.
package dashboard

// Dashboard is Grafana's dashboard JSON model.
type Dashboard struct {
	UID           string     `json:"uid"`
	Title         string     `json:"title"`
	Description   string     `json:"description"`
	Tags          []string   `json:"tags"`
	SchemaVersion int        `json:"schemaVersion"`
	Version       int        `json:"version"`
	Editable      bool       `json:"editable"`
	Refresh       string     `json:"refresh"`
	Time          TimeRange  `json:"time"`
	Templating    Templating `json:"templating"`
	Panels        []Panel    `json:"panels"`
}

// TimeRange is the dashboard's default time range.
type TimeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Templating holds the dashboard's variables.
type Templating struct {
	List []Variable `json:"list"`
}

// Variable is a dashboard variable: the data source, or a label's values.
type Variable struct {
	Name       string      `json:"name"`
	Label      string      `json:"label"`
	Type       string      `json:"type"` // datasource or query
	Query      any         `json:"query"`
	Datasource *Datasource `json:"datasource,omitempty"`
	Multi      bool        `json:"multi"`
	IncludeAll bool        `json:"includeAll"`
	AllValue   string      `json:"allValue,omitempty"`
	Refresh    int         `json:"refresh,omitempty"` // 2: on time range change
	Current    any         `json:"current"`
}

// Datasource names a data source by type and uid (a variable's value).
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Panel is a row or a time series panel.
type Panel struct {
	ID          int          `json:"id"`
	Type        string       `json:"type"` // row or timeseries
	Title       string       `json:"title"`
	Description string       `json:"description,omitempty"`
	GridPos     GridPos      `json:"gridPos"`
	Datasource  *Datasource  `json:"datasource,omitempty"`
	Targets     []Target     `json:"targets,omitempty"`
	FieldConfig *FieldConfig `json:"fieldConfig,omitempty"`
	Collapsed   *bool        `json:"collapsed,omitempty"` // rows only
	Panels      []Panel      `json:"panels"`              // rows only: the panels a collapsed row holds
}

// GridPos places a panel on Grafana's 24-column grid.
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// Target is one PromQL query of a panel.
type Target struct {
	RefID        string `json:"refId"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
}

// FieldConfig sets the unit of a panel's values.
type FieldConfig struct {
	Defaults FieldDefaults `json:"defaults"`
	// Overrides is required by Grafana's schema, even empty.
	Overrides []any `json:"overrides"`
}

// FieldDefaults holds the unit (Grafana's unit ids: reqps, s, bytes, Bps,
// short, percentunit).
type FieldDefaults struct {
	Unit string `json:"unit"`
}
