package main

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/internal/metrics"
)

// metricsServer is a service command's --metrics-addr: the registry its
// service registers in, and where it is served.
type metricsServer struct {
	addr string
	reg  *prometheus.Registry
}

// flags adds --metrics-addr, defaulting to def (env AX_METRICS_ADDR).
func (m *metricsServer) flags(cmd *cobra.Command, def string) {
	what := "off"
	if def != "" {
		what = def
	}
	cmd.Flags().StringVar(&m.addr, "metrics-addr", envOr("AX_METRICS_ADDR", def),
		"address to serve Prometheus metrics on, at /metrics, e.g. 127.0.0.1:9090; empty is off (default "+what+"; env AX_METRICS_ADDR)")
}

// registry returns the registry of the process: the Go runtime and process
// metrics, and what the services register.
func (m *metricsServer) registry() *prometheus.Registry {
	if m.reg == nil {
		m.reg = metrics.NewRegistry()
	}
	return m.reg
}

// run runs svc until ctx ends and, when there is an address, serves the
// metrics beside it; when either fails, the other stops.
func (m *metricsServer) run(ctx context.Context, log zerolog.Logger, svc func(context.Context) error) error {
	if m.addr == "" {
		return svc(ctx)
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg       sync.WaitGroup
		serveErr error
	)
	wg.Go(func() {
		if serveErr = metrics.Serve(runCtx, m.addr, m.registry(), log); serveErr != nil {
			cancel(serveErr)
		}
	})
	err := svc(runCtx)
	cancel(nil)
	wg.Wait()
	if serveErr != nil {
		return serveErr
	}
	return err
}
