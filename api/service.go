package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/internal/metrics"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// Defaults of [Options].
const (
	DefaultAddr            = "127.0.0.1:8080"
	DefaultMaxBodyBytes    = 1 << 20
	DefaultRunWait         = 5 * time.Second
	DefaultShutdownTimeout = 10 * time.Second
)

// Options configures a [Service].
type Options struct {
	// Store reads and writes tasks and reads instances. Required.
	Store *store.Store
	// Conn is the NATS connection that trigger events are published on. Required.
	Conn *nats.Conn
	// Topology names the subjects; the zero value means streams.Default().
	Topology streams.Topology
	// Addr is the TCP address Run listens on (default DefaultAddr).
	Addr string
	// Logger receives the access log and the errors behind 5xx answers;
	// the zero value logs nothing.
	Logger zerolog.Logger
	// MaxBodyBytes is the largest request body accepted (default
	// DefaultMaxBodyBytes); a larger one is refused with 413.
	MaxBodyBytes int64
	// RunWait is how long POST /v1/tasks/{name}/runs waits for the
	// dispatcher to create the instance before it answers 202 (default
	// DefaultRunWait).
	RunWait time.Duration
	// ShutdownTimeout is how long Run lets requests in flight finish once
	// its context ends (default DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// NowFunc returns the current time (default time.Now); it stamps
	// fired_at on the trigger events the API publishes.
	NowFunc func() time.Time
	// TokenCacheTTL is how long the API trusts what it learned of an API
	// token (default DefaultTokenCacheTTL): a token revoked through this
	// API is refused at once; one revoked elsewhere (another replica, ax
	// token revoke) within that time.
	TokenCacheTTL time.Duration
	// Metrics is what GET /metrics serves (default: the Go runtime and
	// process metrics of this process).
	Metrics prometheus.Gatherer
	// TracerProvider makes the spans of the POST routes, children of the
	// request's traceparent header (default none; pass
	// otel.GetTracerProvider() for the program's own; the header's context
	// is passed on to the firings either way).
	TracerProvider trace.TracerProvider
}

// Service is the HTTP API. Its handler is safe for concurrent use.
type Service struct {
	opts    Options
	js      jetstream.JetStream
	tokens  *tokenCache
	handler http.Handler
	ready   chan struct{}
}

// New checks opts, fills in the defaults and builds the routes. It does no I/O.
func New(opts Options) (*Service, error) {
	if opts.Store == nil {
		return nil, errors.New("new api: Options.Store is required")
	}
	if opts.Conn == nil {
		return nil, errors.New("new api: Options.Conn is required")
	}
	if opts.Topology.IsZero() {
		opts.Topology = streams.Default()
	}
	if opts.Addr == "" {
		opts.Addr = DefaultAddr
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.RunWait <= 0 {
		opts.RunWait = DefaultRunWait
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.NowFunc == nil {
		opts.NowFunc = time.Now
	}
	if opts.TokenCacheTTL <= 0 {
		opts.TokenCacheTTL = DefaultTokenCacheTTL
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.NewRegistry()
	}
	js, err := jetstream.New(opts.Conn)
	if err != nil {
		return nil, fmt.Errorf("new api: jetstream: %w", err)
	}
	s := &Service{opts: opts, js: js, tokens: newTokenCache(opts.Store, opts.TokenCacheTTL, opts.Logger), ready: make(chan struct{})}
	s.handler = s.accessLog(s.routes())
	return s, nil
}

// Handler returns the API's handler, with its access log, for a server of
// the caller's own (tests use httptest.NewServer(s.Handler())).
func (s *Service) Handler() http.Handler { return s.handler }

// Ready returns a channel that is closed once Run listens on Options.Addr:
// from then on a connection to it is accepted. It is never closed when
// the API is served through [Service.Handler] alone.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run serves the API on Options.Addr until ctx ends, then stops taking
// connections, lets the requests in flight finish for up to
// Options.ShutdownTimeout, and returns. It returns an error when it cannot
// listen or the server fails; nil after a clean shutdown. It refuses to
// start, with an error wrapping [ErrNoAdminToken] that says how to make
// one, while no live admin token exists. A Service runs once.
func (s *Service) Run(ctx context.Context) error {
	if err := s.checkAdminToken(ctx); err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("api: listen on %s: %w", s.opts.Addr, err)
	}
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	s.opts.Logger.Info().Str("addr", ln.Addr().String()).Msg("api listening")
	close(s.ready)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("api: serve on %s: %w", s.opts.Addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if err != nil {
		// Requests still running past the timeout are cut off.
		err = errors.Join(fmt.Errorf("api: shut down: %w", err), srv.Close())
	}
	<-served // http.ErrServerClosed
	return err
}

// noRoute answers a request that no route takes: 405 when the path has
// routes for other methods, 404 otherwise — in JSON, like every answer.
func noRoute(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "/" && pattern != "" {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, &wire.Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
			Message: fmt.Sprintf("%s %s is not a route; this path takes %s", r.Method, r.URL.Path, strings.Join(allowed, ", "))})
		return
	}
	writeError(w, &wire.Error{Status: http.StatusNotFound, Code: "route_not_found",
		Message: fmt.Sprintf("%s %s is not a route of the AX API; the routes are under /v1/tasks, /v1/instances and /v1/audit", r.Method, r.URL.Path)})
}

// statusWriter remembers the status a handler wrote, for the access log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Service) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		ev := s.opts.Logger.Info()
		if sw.status < http.StatusBadRequest {
			// An answered request is a line per call (probes every few
			// seconds, clients each run): debug. A refusal says
			// something went wrong: info.
			ev = s.opts.Logger.Debug()
		}
		ev.Str("method", r.Method).
			Str("path", r.URL.Path).
			Int("status", sw.status).
			Float64("duration_ms", float64(time.Since(start).Microseconds())/1000).
			Msg("http request")
	})
}
