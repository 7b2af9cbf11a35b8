// Command generate writes the Grafana dashboard (idemguard.json) and the
// Prometheus alert rules (alerts.yaml) of package dashboards into a
// directory: go generate ./dashboards/... runs it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemguard/idemguard/dashboards"
)

func main() {
	out := flag.String("out", ".", "the directory to write idemguard.json and alerts.yaml into")
	flag.Parse()
	files, err := dashboards.Generate(dashboards.DefaultMetrics())
	if err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(1)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(*out, name), b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "generate:", err)
			os.Exit(1)
		}
	}
}
