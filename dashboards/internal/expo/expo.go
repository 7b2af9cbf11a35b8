// Package expo exposes a meter provider's metrics the way a Prometheus
// server scrapes them: the OpenTelemetry SDK, its Prometheus exporter, a
// registry of its own and the text exposition over HTTP.
package expo

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Endpoint is a meter provider whose metrics are served at URL, as an
// application exposes them to Prometheus.
type Endpoint struct {
	Provider *sdkmetric.MeterProvider
	URL      string
	srv      *httptest.Server
}

// New starts an Endpoint on a loopback address. Close stops it.
func New() (*Endpoint, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return &Endpoint{Provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), URL: srv.URL + "/metrics", srv: srv}, nil
}

// Close stops the server and the provider.
func (e *Endpoint) Close() {
	e.srv.Close()
	e.Provider.Shutdown(context.Background())
}

// Scrape fetches the text exposition, as Prometheus would (in the text
// format: the one every Prometheus version reads).
func (e *Endpoint) Scrape(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.URL, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("expo: scrape: %s: %s", resp.Status, b)
	}
	return string(b), nil
}

// Parse reads a text exposition into metric families by name.
func Parse(text string) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(strings.NewReader(text))
}
