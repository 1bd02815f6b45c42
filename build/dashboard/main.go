// Command dashboard writes meshdns's Grafana dashboard (internal/dashboard)
// to charts/meshdns/files/meshdns-dashboard.json, where the chart's
// ConfigMap and deploy/monitoring take it:
//
//	go run ./build/dashboard
//
// TestDashboardFileCurrent fails when the file and the code disagree.
package main

import (
	"log"
	"os"

	"github.com/meshdns/meshdns/internal/dashboard"
)

func main() {
	b, err := dashboard.JSON()
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(dashboard.File, b, 0o644); err != nil {
		log.Fatal(err)
	}
}
