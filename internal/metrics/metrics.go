// Package metrics serves a Prometheus registry on /metrics: the small HTTP
// server every AX service runs when it is given a metrics address.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/internal/buildinfo"
)

// NewRegistry returns a registry holding the Go runtime and process
// collectors and ax_build_info (internal/buildinfo), for a process's services to register their own metrics in.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildinfo.Collector())
	return reg
}

// Handler serves g in the Prometheus text format, or in OpenMetrics to a
// scraper that asks for it (Accept: application/openmetrics-text, as
// Prometheus does by default): only OpenMetrics carries the latency
// histograms' exemplars, which link a bucket to a firing's trace. Every
// counter is named …_total, so the series are the same in either format.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// Serve listens on addr and serves g on /metrics until ctx ends; then it
// shuts the server down (waiting up to 5 s for scrapes in flight) and
// returns nil. It returns an error when it cannot listen or the server fails.
func Serve(ctx context.Context, addr string, g prometheus.Gatherer, log zerolog.Logger) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("serve metrics: listen on %s: %w", addr, err)
	}
	return ServeListener(ctx, ln, g, log)
}

// ServeListener is [Serve] on a listener the caller opened; it closes ln.
func ServeListener(ctx context.Context, ln net.Listener, g prometheus.Gatherer, log zerolog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler(g))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info().Str("addr", ln.Addr().String()).Msg("metrics listening")
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve metrics on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		err = errors.Join(fmt.Errorf("shut down metrics server: %w", err), srv.Close())
	}
	<-served
	return err
}
