package executor

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sync"
)

// Mux maps handler names to handlers. A task definition's execution.handler
// names the handler that runs it. Mux is safe for concurrent use; the zero
// value is not usable, make one with [NewMux].
type Mux struct {
	mu       sync.RWMutex
	handlers map[string]muxEntry
}

// muxEntry is a registered handler and its options.
type muxEntry struct {
	handler Handler
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
	m.handlers[name] = e
}

// HandleFunc registers f under name, like [Mux.Handle].
func (m *Mux) HandleFunc(name string, f func(ctx context.Context, t *Task) (any, error), opts ...HandlerOption) {
	if f == nil {
		panic("executor: Mux.HandleFunc(" + name + ") with a nil function")
	}
	m.Handle(name, HandlerFunc(f), opts...)
}

// Handler returns the handler registered under name.
func (m *Mux) Handler(name string) (Handler, bool) {
	e, ok := m.entry(name)
	return e.handler, ok
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
