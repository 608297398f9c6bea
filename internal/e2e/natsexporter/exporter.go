// Package natsexporter is the JetStream part of prometheus-nats-exporter
// v0.15.0 (github.com/nats-io/prometheus-nats-exporter, Apache License
// 2.0), the exporter docker-compose.yml runs as nats-exporter: its
// collector (jsz.go, as released) behind the exporter's command line, for
// the tests that evaluate AX's dashboard against a cluster
// (internal/e2e). The module proxy does not serve that module, so its
// collector is kept here; what it exports — names, labels, values — is
// the release's.
package natsexporter

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// JetStreamSystem is the namespace of the JetStream metrics
// (collector.JetStreamSystem).
const JetStreamSystem = "jetstream"

// CollectedServer is a NATS server the collector reads: its monitoring URL
// and the id its series carry as server_id (collector.CollectedServer).
type CollectedServer struct {
	URL string
	ID  string
}

// Handler serves /metrics as the exporter does when run as
// `prometheus-nats-exporter -jsz=<filter> url…`: each argument is a
// server's monitoring URL, optionally "id,url"; the id defaults to the
// URL's scheme and host (main.go parseServerIDAndURL).
func Handler(jszFilter string, args []string) (http.Handler, error) {
	switch strings.ToLower(jszFilter) {
	case "account", "accounts", "consumer", "consumers", "all", "stream", "streams":
	default:
		return nil, fmt.Errorf("invalid jsz filter %q", jszFilter)
	}
	var servers []*CollectedServer
	for _, arg := range args {
		id, monURL := "", arg
		if i := strings.LastIndex(arg, ","); i >= 0 {
			id, monURL = arg[:i], arg[i+1:]
		}
		u, err := url.ParseRequestURI(monURL)
		if err != nil {
			return nil, fmt.Errorf("unable to parse URL %q: %w", arg, err)
		}
		if id == "" {
			id = fmt.Sprintf("%s://%s", u.Scheme, u.Host)
		}
		servers = append(servers, &CollectedServer{ID: id, URL: monURL})
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(newJszCollector(JetStreamSystem, jszFilter, servers)); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux, nil
}

// getMetricURL reads the JSON answer of a monitoring URL into response
// (collector.getMetricURL).
func getMetricURL(httpClient *http.Client, url string, response any) error {
	resp, err := httpClient.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return json.Unmarshal(body, &response)
}

// Debugf is the exporter's debug log: off, as the exporter runs by default.
func Debugf(string, ...any) {}
