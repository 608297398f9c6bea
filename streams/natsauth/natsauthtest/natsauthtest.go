// Package natsauthtest helps tests that act as a NATS user against a real
// server: it starts an embedded server that admits only its users, connects
// as one of them, and collects the permission violations the server tells
// the connection of, so that a test can tell a refused action from one that
// did nothing.
package natsauthtest

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Refusals collects the permission violations a connection is told of: pass
// [Refusals.Handler] as its nats.ErrorHandler. Safe for concurrent use.
type Refusals struct {
	mu   sync.Mutex
	errs []string
	seen chan struct{} // gets a value on every error
}

// New returns an empty Refusals.
func New() *Refusals { return &Refusals{seen: make(chan struct{}, 1)} }

// Handler is the connection's asynchronous error handler.
func (r *Refusals) Handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err.Error())
	r.mu.Unlock()
	select {
	case r.seen <- struct{}{}:
	default:
	}
}

// Errors returns every error the connection was told of, in order.
func (r *Refusals) Errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errs)
}

// Refused reports whether the server refused a publish to (or a
// subscription on) subject.
func (r *Refusals) Refused(subject string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.errs, func(e string) bool {
		return strings.Contains(strings.ToLower(e), "permissions violation") && strings.Contains(e, `"`+subject+`"`)
	})
}

// Try runs action until it returns or the server refuses subject (its
// context then ends), and reports whether the server refused it; it fails
// the test when neither happens within a minute. Whether the action did
// anything is for the caller to check by its effect. An action that gets
// no answer (a plain publish) should wait for its context to end, for a
// while, so that the refusal can arrive.
func (r *Refusals) Try(t testing.TB, subject string, action func(context.Context) error) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- action(ctx) }()
	for {
		select {
		case <-done:
			return r.Refused(subject)
		case <-r.seen:
			if r.Refused(subject) {
				cancel()
				<-done
				return true
			}
		case <-ctx.Done():
			t.Fatalf("%s: neither answered nor refused in a minute", subject)
		}
	}
}

// Request returns an action for [Refusals.Try] that sends body to subject on
// nc and waits for the answer (or for its context to end).
func Request(nc *nats.Conn, subject, body string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := nc.RequestWithContext(ctx, subject, []byte(body))
		return err
	}
}
