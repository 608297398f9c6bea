// Package devstack runs AX's services in one process, each on a NATS
// connection of its own as they run apart: the dispatcher, the trigger,
// the executors, the API and the auditor (its outbox relay and its
// monitor). ax dev runs an installation with it and the end-to-end tests
// (internal/e2e) their systems, so that the wiring exists once.
//
// [Start] connects and makes every service, then starts them one by one,
// each once the one before is ready, watching each one's Run for an error
// while it waits; [Stack.Stop] stops them in the reverse order. The NATS
// server and PostgreSQL are the caller's.
//
// It is the one package besides cmd/ax that imports every service, and
// sits beside them, not under internal/: internal/ holds leaves only, so
// the services share one layer (internal/layout holds the import graph to
// that).
package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/api"
	"github.com/ax-scheduler/ax/auditor"
	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
	"github.com/ax-scheduler/ax/trigger"
)

// Services are the services a stack runs by default, in the order [Start]
// starts them (the executors start after the trigger, before the API).
var Services = []natsauth.Role{natsauth.Dispatcher, natsauth.Trigger, natsauth.API, natsauth.Auditor}

// Options configures a stack. The options of each service are the
// caller's to tune; the stack sets what it owns (Conn, Store, Topology)
// and fills the shared ones (Logger, Metrics, Streams) where they are
// zero.
type Options struct {
	// NATSURL is the URL of the NATS server or cluster. Required.
	NATSURL string
	// Passwords are the NATS users' passwords by user name. A service
	// connects as the user called by its role (natsauth.Dispatcher, …), an
	// executor as [Executor.User], with that user's inbox prefix
	// ([natsauth.InboxPrefix]); a user without a password here connects
	// with no user at all, to a server that admits anyone.
	Passwords map[string]string
	// NATSOptions returns more options for the connection of user, applied
	// after the stack's own (a name, endless reconnects, the user, and an
	// error handler that logs what the server refuses); nil adds none.
	NATSOptions func(user string) []nats.Option
	// Store is the PostgreSQL store, migrated. Required; the caller keeps
	// ownership of its pool.
	Store *store.Store
	// Topology names the subjects, streams and buckets (default
	// streams.Default()).
	Topology streams.Topology
	// Streams sizes the topology (the lease TTL, the replicas): the
	// dispatcher's unless Dispatcher.Streams is set, and what Ensure
	// ensures.
	Streams streams.Config
	// Ensure ensures the topology with Streams, on a connection of the
	// dispatcher's user, before any service starts, so that the services
	// that need it (the executors) do not wait for the dispatcher's.
	Ensure bool
	// Services lists the services to run, of [Services] (nil: all of
	// them); they start in the order of [Services] whatever the order here.
	Services []natsauth.Role
	// Dispatcher, Trigger, API and Auditor are the services' options.
	// The API runs, listening on API.Addr, when API.Addr is set; when it is
	// empty the API is made but not run, and the caller serves
	// [Stack].API.Handler() (a test's httptest.Server).
	Dispatcher dispatcher.Options
	Trigger    trigger.Options
	API        api.Options
	Auditor    auditor.Options
	// Executors are the executors to run, each on a connection of its own.
	Executors []Executor
	// Logger receives the services' log lines (default: none).
	Logger zerolog.Logger
	// Metrics is where the dispatcher and the auditor register their
	// metrics and what the API's GET /metrics serves, unless their options
	// name another; nil leaves each its default.
	Metrics *prometheus.Registry
	// ProfileLabels gives the goroutines of each service, and of its NATS
	// connection, the pprof label "service" with the service's name, so
	// that a CPU profile splits by service.
	ProfileLabels bool
}

// Executor is one executor of a stack.
type Executor struct {
	// Name names the executor in errors, in its profile label and for
	// [Stack.Conn] (default "executor").
	Name string
	// User is the NATS user it connects as (default natsauth.Executor).
	User string
	// Options are the executor's; the stack sets Conn and Topology, and
	// Logger where it is zero.
	Options executor.Options
}

// Stack is a set of running services. Its methods are safe for concurrent
// use.
type Stack struct {
	// Dispatcher, Trigger, API and Auditor are the services, nil for those
	// not in Options.Services.
	Dispatcher *dispatcher.Service
	Trigger    *trigger.Service
	API        *api.Service
	Auditor    *auditor.Service
	// Executors are the executors of Options.Executors, in that order.
	Executors []*executor.Service

	conns    map[string]*nats.Conn
	all      []*nats.Conn
	units    []*unit // in the order they start
	started  int     // how many units run
	failed   chan struct{}
	failOnce sync.Once
	stopOnce sync.Once
	stopErr  error
}

// unit is one service of a stack.
type unit struct {
	name  string
	run   func(context.Context) error
	ready <-chan struct{} // nil: ready once it runs

	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's answer, set before done is closed
}

// Start connects every service of opts to NATS and makes it, ensures the
// topology when opts.Ensure is set, then starts the services in the order
// of [Services] (the executors after the trigger), each once the one
// before is ready: it waits for a service's Ready while watching its Run,
// and fails at once with the error of a service that stopped before it
// was ready. ctx bounds the start alone; the services run until
// [Stack.Stop]. When Start fails, it has stopped what it started and
// closed its connections.
func Start(ctx context.Context, opts Options) (*Stack, error) {
	if opts.NATSURL == "" {
		return nil, errors.New("devstack: Options.NATSURL is required")
	}
	if opts.Store == nil {
		return nil, errors.New("devstack: Options.Store is required")
	}
	if opts.Topology.IsZero() {
		opts.Topology = streams.Default()
	}
	roles := opts.Services
	if roles == nil {
		roles = Services
	}
	for _, role := range roles {
		if !slices.Contains(Services, role) {
			return nil, fmt.Errorf("devstack: Options.Services: %q is not one of %v (executors are Options.Executors)", role, Services)
		}
	}
	s := &Stack{conns: map[string]*nats.Conn{}, failed: make(chan struct{})}
	if err := s.make(opts, roles); err != nil {
		s.closeConns()
		return nil, err
	}
	if opts.Ensure {
		if err := s.ensure(ctx, opts); err != nil {
			s.closeConns()
			return nil, err
		}
	}
	for _, u := range s.units {
		if err := s.start(ctx, opts, u); err != nil {
			_ = s.Stop(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return s, nil
}

// make connects and makes the services of roles and the executors, in
// the order they start.
func (s *Stack) make(opts Options, roles []natsauth.Role) error {
	has := func(role natsauth.Role) bool { return slices.Contains(roles, role) }
	if has(natsauth.Dispatcher) {
		o := opts.Dispatcher
		nc, err := s.connect(opts, string(natsauth.Dispatcher), string(natsauth.Dispatcher))
		if err != nil {
			return err
		}
		o.Conn, o.Store, o.Topology, o.Logger = nc, opts.Store, opts.Topology, orLogger(o.Logger, opts.Logger)
		if o.Streams == (streams.Config{}) {
			o.Streams = opts.Streams
		}
		if o.Metrics == nil && opts.Metrics != nil {
			o.Metrics = opts.Metrics
		}
		if s.Dispatcher, err = dispatcher.New(o); err != nil {
			return err
		}
		s.add("dispatcher", s.Dispatcher.Run, s.Dispatcher.Ready())
	}
	if has(natsauth.Trigger) {
		o := opts.Trigger
		nc, err := s.connect(opts, string(natsauth.Trigger), string(natsauth.Trigger))
		if err != nil {
			return err
		}
		o.Conn, o.Store, o.Topology, o.Logger = nc, opts.Store, opts.Topology, orLogger(o.Logger, opts.Logger)
		if s.Trigger, err = trigger.New(o); err != nil {
			return err
		}
		s.add("trigger", s.Trigger.Run, s.Trigger.Ready())
	}
	for _, e := range opts.Executors {
		name, user := e.Name, e.User
		if name == "" {
			name = "executor"
		}
		if user == "" {
			user = string(natsauth.Executor)
		}
		nc, err := s.connect(opts, name, user)
		if err != nil {
			return err
		}
		o := e.Options
		o.Conn, o.Topology = nc, opts.Topology
		if o.Logger == nil {
			o.Logger = slog.New(zerolog.NewSlogHandler(opts.Logger))
		}
		ex, err := executor.New(o)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		s.Executors = append(s.Executors, ex)
		s.add(name, ex.Run, ex.Ready())
	}
	if has(natsauth.API) {
		o := opts.API
		nc, err := s.connect(opts, string(natsauth.API), string(natsauth.API))
		if err != nil {
			return err
		}
		o.Conn, o.Store, o.Topology, o.Logger = nc, opts.Store, opts.Topology, orLogger(o.Logger, opts.Logger)
		if o.Metrics == nil && opts.Metrics != nil {
			o.Metrics = opts.Metrics
		}
		serve := o.Addr != ""
		if s.API, err = api.New(o); err != nil {
			return err
		}
		if serve {
			s.add("api", s.API.Run, s.API.Ready())
		}
	}
	if has(natsauth.Auditor) {
		o := opts.Auditor
		nc, err := s.connect(opts, string(natsauth.Auditor), string(natsauth.Auditor))
		if err != nil {
			return err
		}
		o.Conn, o.Store, o.Topology, o.Logger = nc, opts.Store, opts.Topology, orLogger(o.Logger, opts.Logger)
		if o.Metrics == nil && opts.Metrics != nil {
			o.Metrics = opts.Metrics
		}
		if s.Auditor, err = auditor.New(o); err != nil {
			return err
		}
		// The auditor has no Ready: its two jobs wait for their leads.
		s.add("auditor", s.Auditor.Run, nil)
	}
	return nil
}

// orLogger returns own unless it is the zero Logger, else the stack's.
func orLogger(own, stack zerolog.Logger) zerolog.Logger {
	if reflect.ValueOf(own).IsZero() {
		return stack
	}
	return own
}

// add appends a service to start.
func (s *Stack) add(name string, run func(context.Context) error, ready <-chan struct{}) {
	s.units = append(s.units, &unit{name: name, run: run, ready: ready, done: make(chan struct{})})
}

// connect opens the connection of the service name as user, labelled
// like the service when opts.ProfileLabels is set.
func (s *Stack) connect(opts Options, name, user string) (*nats.Conn, error) {
	natsOpts := []nats.Option{nats.Name("ax " + user), nats.MaxReconnects(-1),
		// Without a handler, a refused publish or subscription (a missing
		// permission) would go unseen.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := opts.Logger.Warn().Err(err).Str("connection", user)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("nats error")
		})}
	if pw, ok := opts.Passwords[user]; ok {
		natsOpts = append(natsOpts, nats.UserInfo(user, pw), nats.CustomInboxPrefix(natsauth.InboxPrefix(user)))
	}
	if opts.NATSOptions != nil {
		natsOpts = append(natsOpts, opts.NATSOptions(user)...)
	}
	var (
		nc  *nats.Conn
		err error
	)
	labelled(opts, name, func() { nc, err = nats.Connect(opts.NATSURL, natsOpts...) })
	if err != nil {
		return nil, fmt.Errorf("%s: connect to NATS at %s as %s: %w", name, opts.NATSURL, user, err)
	}
	s.all = append(s.all, nc)
	if _, taken := s.conns[name]; !taken {
		s.conns[name] = nc
	}
	return nc, nil
}

// labelled runs f with the pprof label service=name on its goroutine, and
// so on every goroutine f starts, when opts.ProfileLabels is set.
func labelled(opts Options, name string, f func()) {
	if !opts.ProfileLabels {
		f()
		return
	}
	pprof.Do(context.Background(), pprof.Labels("service", name), func(context.Context) { f() })
}

// ensure ensures the topology on a connection of the dispatcher's user,
// closed after. It tries again while the failure is one waiting may cure
// (streams.UntilStarted), as the services' own start-ups do: a cluster
// just started may not yet have heard from a peer it would place a
// replica on.
func (s *Stack) ensure(ctx context.Context, opts Options) error {
	nc, err := s.connect(opts, "ensure", string(natsauth.Dispatcher))
	if err != nil {
		return err
	}
	defer nc.Close()
	delete(s.conns, "ensure")
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("ensure the topology: %w", err)
	}
	err = streams.UntilStarted(ctx, func(err error, wait time.Duration) {
		opts.Logger.Warn().Err(err).Dur("retry_in", wait).Msg("ensuring the topology failed; trying again")
	}, func(ctx context.Context) error {
		return opts.Topology.Ensure(ctx, js, opts.Streams)
	})
	if err != nil {
		return fmt.Errorf("ensure the topology: %w", err)
	}
	return nil
}

// start runs u on its own goroutine and returns once it is ready, or with
// its error if Run returned before, or ctx's if ctx ended first.
func (s *Stack) start(ctx context.Context, opts Options, u *unit) error {
	runCtx, cancel := context.WithCancel(context.Background())
	u.cancel = cancel
	s.started++
	labelled(opts, u.name, func() {
		go func() {
			defer close(u.done)
			u.err = u.run(runCtx)
			if runCtx.Err() == nil {
				// It stopped by itself.
				s.failOnce.Do(func() { close(s.failed) })
			}
		}()
	})
	if u.ready == nil {
		return nil
	}
	select {
	case <-u.ready:
		return nil
	case <-u.done:
		if u.err != nil {
			return fmt.Errorf("%s stopped before it was ready: %w", u.name, u.err)
		}
		return fmt.Errorf("%s stopped before it was ready, with no error", u.name)
	case <-ctx.Done():
		return fmt.Errorf("%s not ready: %w", u.name, context.Cause(ctx))
	}
}

// Conn returns the NATS connection of the service or executor called
// name ("dispatcher", "trigger", "api", "auditor", an [Executor.Name]),
// nil for one the stack does not run. The stack owns it.
func (s *Stack) Conn(name string) *nats.Conn { return s.conns[name] }

// Failed is closed once a service's Run has returned before [Stack.Stop]
// asked it to: the stack is no longer whole. Stop returns the error.
func (s *Stack) Failed() <-chan struct{} { return s.failed }

// Stop stops the services in the reverse order of their start, each after
// the one started after it has returned, then closes the connections. It
// returns the errors the services' Runs returned, each prefixed with the
// service's name, and names those whose Run had not returned when ctx
// ended (Stop then leaves them to return by themselves). Later calls
// return what the first one did.
func (s *Stack) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		var errs []error
		for i := s.started - 1; i >= 0; i-- {
			u := s.units[i]
			u.cancel()
			select {
			case <-u.done:
			case <-ctx.Done():
			}
			select {
			case <-u.done:
				if u.err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", u.name, u.err))
				}
			default:
				errs = append(errs, fmt.Errorf("%s: Run did not return before the stop's end: %w", u.name, context.Cause(ctx)))
			}
		}
		s.closeConns()
		s.stopErr = errors.Join(errs...)
	})
	return s.stopErr
}

// closeConns closes every connection the stack opened.
func (s *Stack) closeConns() {
	for _, nc := range s.all {
		nc.Close()
	}
}
