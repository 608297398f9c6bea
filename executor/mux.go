package executor

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Mux maps handler names to handlers. A task definition's execution.handler
// names the handler that runs it. A Mux is itself a [Handler] (see
// [Mux.HandleTask]), and [Mux.Use] wraps every handler it holds in
// middleware. Mux is safe for concurrent use; the zero value is not usable,
// make one with [NewMux].
type Mux struct {
	mu         sync.RWMutex
	handlers   map[string]muxEntry
	middleware []Middleware
}

// Middleware wraps a [Handler] in another: code that runs around every
// attempt (a log line, a metric, a trace span, a panic policy), as net/http
// middleware wraps an http.Handler. It is called once per handler when the
// handler or the middleware is registered, not per attempt.
type Middleware func(Handler) Handler

// muxEntry is a registered handler and its options.
type muxEntry struct {
	handler Handler // as registered
	wrapped Handler // handler in the mux's middleware
	limits  handlerLimits
}

// handlerNameRE is the pattern of execution.handler in task.schema.json.
var handlerNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// NewMux returns an empty mux.
func NewMux() *Mux { return &Mux{handlers: make(map[string]muxEntry)} }

// Handle registers h under name, with options that bound how a worker runs
// it ([Concurrency], [RateLimit]); every worker serving the mux applies
// them on its own. A name is what a task definition's execution.handler
// names: 1-128 letters, digits, '.', '_' and '-' (it becomes part of the
// NATS subject of the handler's queue). It panics when name is not such a
// name, h is nil or name is already registered: these are programming
// mistakes to catch at start-up.
func (m *Mux) Handle(name string, h Handler, opts ...HandlerOption) {
	if name == "" {
		panic("executor: Mux.Handle with an empty handler name")
	}
	if !handlerNameRE.MatchString(name) {
		panic(fmt.Sprintf("executor: Mux.Handle(%q): a handler name is 1-128 letters, digits, '.', '_' and '-', as execution.handler names it", name))
	}
	if h == nil {
		panic("executor: Mux.Handle(" + name + ") with a nil handler")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.handlers[name]; ok {
		panic("executor: handler " + name + " is registered twice")
	}
	e := muxEntry{handler: h}
	for _, opt := range opts {
		if opt == nil {
			panic("executor: Mux.Handle(" + name + ") with a nil option")
		}
		opt(&e.limits)
	}
	e.wrapped = wrap(name, h, m.middleware)
	m.handlers[name] = e
}

// Use adds middleware around every handler of the mux, those registered
// already and those registered later. The first middleware added is the
// outermost: m.Use(a, b) runs a, then b, then the handler. Every worker
// serving the mux, and [Mux.Handler] and [Mux.HandleTask], see the
// handlers wrapped. Use panics when a middleware is nil or returns a nil
// handler: these are programming mistakes to catch at start-up.
func (m *Mux) Use(mw ...Middleware) {
	for i, f := range mw {
		if f == nil {
			panic(fmt.Sprintf("executor: Mux.Use with a nil middleware (argument %d)", i))
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.middleware = append(m.middleware, mw...)
	for name, e := range m.handlers {
		e.wrapped = wrap(name, e.handler, m.middleware)
		m.handlers[name] = e
	}
}

// wrap returns h inside mw, mw[0] outermost.
func wrap(name string, h Handler, mw []Middleware) Handler {
	for i := len(mw) - 1; i >= 0; i-- {
		if h = mw[i](h); h == nil {
			panic(fmt.Sprintf("executor: middleware %d returned a nil handler for %s", i, name))
		}
	}
	return h
}

// HandleTask makes the mux a [Handler]: it runs the handler registered
// under t.Handler (the task's execution.handler), in the mux's middleware.
// A name the mux does not have fails permanently, with an error that lists
// the names it has. A mux can so be registered in another mux, wrapped in
// middleware of its own, or called directly by a test.
func (m *Mux) HandleTask(ctx context.Context, t *Job) (any, error) {
	e, ok := m.entry(t.Handler)
	if !ok {
		return nil, Permanent(fmt.Errorf("task %q: no handler %q here (handlers: %s); register it with Mux.Handle",
			t.Name, t.Handler, strings.Join(m.Names(), ", ")))
	}
	return e.wrapped.HandleTask(ctx, t)
}

// HandleFunc registers f under name, like [Mux.Handle].
func (m *Mux) HandleFunc(name string, f func(ctx context.Context, t *Job) (any, error), opts ...HandlerOption) {
	if f == nil {
		panic("executor: Mux.HandleFunc(" + name + ") with a nil function")
	}
	m.Handle(name, HandlerFunc(f), opts...)
}

// Handler returns the handler registered under name, wrapped in the mux's
// middleware (see [Mux.Use]): what a worker runs for it.
func (m *Mux) Handler(name string) (Handler, bool) {
	e, ok := m.entry(name)
	return e.wrapped, ok
}

// entry returns the handler registered under name with its options.
func (m *Mux) entry(name string) (muxEntry, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.handlers[name]
	return e, ok
}

// Names returns the registered handler names, sorted.
func (m *Mux) Names() []string {
	m.mu.RLock()
	names := make([]string, 0, len(m.handlers))
	for name := range m.handlers {
		names = append(names, name)
	}
	m.mu.RUnlock()
	slices.Sort(names)
	return names
}
