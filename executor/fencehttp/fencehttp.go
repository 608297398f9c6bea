// Package fencehttp carries an attempt's fencing token
// ([executor.Job.Fence]) to a downstream service in the AX-Fence header,
// and lets that service refuse the requests of a stale attempt: one whose
// token is below the greatest it has accepted for the same resource.
//
// The handler's side:
//
//	req, _ := http.NewRequestWithContext(ctx, "POST", url, body)
//	fencehttp.Set(req, job)
//
// The service's side, around the handler that writes:
//
//	guard := fencehttp.NewGuard(func(r *http.Request) string { return r.URL.Path })
//	mux.Handle("/settlements/", guard.Wrap(settle))
//
// A refused request gets 409 Conflict, and the handler sees a stale write
// as that status. The [Guard] keeps its fences in memory: a service that
// restarts, or runs in several replicas, keeps them in its own store
// instead (see package [github.com/ax-scheduler/ax/executor/fencepg]),
// calling [Token] to read the header.
package fencehttp

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/ax-scheduler/ax/executor"
)

// Header is the header that carries the token, in decimal.
const Header = executor.FenceHeader

// Set sets the AX-Fence header of req to the attempt's token.
func Set(req *http.Request, job *executor.Job) {
	req.Header.Set(Header, job.FenceString())
}

// Token reads the AX-Fence header of r: ok is false when it is missing;
// err says what is wrong with one that is not a positive decimal number.
func Token(r *http.Request) (token uint64, ok bool, err error) {
	v := r.Header.Get(Header)
	if v == "" {
		return 0, false, nil
	}
	token, err = strconv.ParseUint(v, 10, 64)
	if err != nil || token == 0 {
		return 0, true, fmt.Errorf("header %s: %q is not a fencing token (a positive decimal number)", Header, v)
	}
	return token, true, nil
}

// ErrStale is the error of [Guard.Admit] for a token below the resource's
// fence.
var ErrStale = errors.New("fenced out: a newer attempt has written to the resource")

// Guard keeps, per resource, the greatest token it admitted, in memory.
// Its methods are safe for concurrent use.
type Guard struct {
	resource func(*http.Request) string
	// Optional, when true, lets through a request without the header
	// (one that no AX attempt made); by default it is refused with 428.
	Optional bool

	mu     sync.Mutex
	fences map[string]uint64
}

// NewGuard returns a guard that names the resource of a request with
// resource (its path, say).
func NewGuard(resource func(*http.Request) string) *Guard {
	return &Guard{resource: resource, fences: map[string]uint64{}}
}

// Admit raises the fence of resource to token, or returns [ErrStale] when
// it is above token already. An equal token passes: one attempt may
// write many times.
func (g *Guard) Admit(resource string, token uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f := g.fences[resource]; f > token {
		return fmt.Errorf("%s: token %d, fence %d: %w", resource, token, f, ErrStale)
	}
	g.fences[resource] = token
	return nil
}

// Fence returns the fence of resource: the greatest token admitted, 0 for none.
func (g *Guard) Fence(resource string) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fences[resource]
}

// Wrap returns a handler that admits each request's token before next
// serves it: a stale token gets 409 Conflict, a malformed one 400, a
// missing one 428 Precondition Required (unless Optional). Requests of
// one resource are served one at a time, so that a stale request cannot
// pass the check while a newer one is being served.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	var serial sync.Map // resource → *sync.Mutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok, err := Token(r)
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		case !ok && g.Optional:
			next.ServeHTTP(w, r)
			return
		case !ok:
			http.Error(w, "header "+Header+" is missing: send the attempt's fencing token (fencehttp.Set)", http.StatusPreconditionRequired)
			return
		}
		res := g.resource(r)
		m, _ := serial.LoadOrStore(res, &sync.Mutex{})
		m.(*sync.Mutex).Lock()
		defer m.(*sync.Mutex).Unlock()
		if err := g.Admit(res, token); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		next.ServeHTTP(w, r)
	})
}
