package main

import (
	"context"
	"fmt"
	"net"
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
		"address to serve Prometheus metrics on, at /metrics, without a token: a port alone (:9090) listens on loopback only, 0.0.0.0:9090 on every interface; empty is off (default "+what+"; env AX_METRICS_ADDR)")
}

// metricsListenAddr is where --metrics-addr addr listens: the metrics
// take no token, so an address without a host (":9090") is loopback's,
// and every interface must be asked for by name (0.0.0.0:9090, [::]:9090).
func metricsListenAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "" {
		return addr
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// serveMetrics serves reg on --metrics-addr addr until ctx ends, with a
// warning when anyone beyond this machine may read them.
func serveMetrics(ctx context.Context, addr string, reg prometheus.Gatherer, log zerolog.Logger) error {
	ln, err := listenMetrics(ctx, addr, log)
	if err != nil {
		return err
	}
	return metrics.ServeListener(ctx, ln, reg, log)
}

// listenMetrics listens on --metrics-addr addr for [metrics.ServeListener],
// with a warning when anyone beyond this machine may read the metrics.
func listenMetrics(ctx context.Context, addr string, log zerolog.Logger) (net.Listener, error) {
	addr = metricsListenAddr(addr)
	if host, _, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			log.Warn().Str("addr", addr).Msg("metrics served without a token beyond loopback: anyone who reaches this address reads them; keep it on a private network")
		}
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serve metrics: listen on %s: %w", addr, err)
	}
	return ln, nil
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
		if serveErr = serveMetrics(runCtx, m.addr, m.registry(), log); serveErr != nil {
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
