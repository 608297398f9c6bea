// Package metricstest reads a service's /metrics as Prometheus does, for
// tests.
package metricstest

import (
	"net/http/httptest"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape reads the metrics srv serves at /metrics, in Prometheus's text
// format, by family name. It fails the test when the request fails or the
// answer does not parse.
func Scrape(t testing.TB, srv *httptest.Server) map[string]*dto.MetricFamily {
	t.Helper()
	r, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return families
}
