package gauges

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestOfKeepsServersApart(t *testing.T) {
	vec := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "entries"}, []string{"server", "zone"})
	Of(vec, []string{"dns://:1053"}, "example.").Set(3)
	Of(vec, []string{"dns://:2053", "dns://[::1]:2053"}, "example.").Set(5)
	for srv, want := range map[string]float64{"dns://:1053": 3, "dns://:2053": 5, "dns://[::1]:2053": 5} {
		var m dto.Metric
		if err := vec.WithLabelValues(srv, "example.").Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetGauge().GetValue(); got != want {
			t.Errorf("%s: %v, want %v", srv, got, want)
		}
	}
}
