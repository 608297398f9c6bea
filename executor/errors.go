package executor

import (
	"errors"
	"fmt"
	"time"
)

// ErrLeaseLost is the cause ([context.Cause]) of an attempt's context when
// the worker lost the attempt's lease: a renewal found that the lease had
// expired, so the dispatcher fails the attempt as lost (or did). The worker
// does not report a failure of such an attempt. A success that its handler
// returns all the same is reported: a lease also lapses when a restarted
// nats-server ages it out while the dispatchers wait for reports, and
// PostgreSQL's guarded write applies the success only if its attempt is
// still the instance's.
var ErrLeaseLost = errors.New("lease lost: the attempt's lease expired before the worker renewed it")

// Permanent marks err as a failure that must not be retried: the attempt
// fails and the instance does not get another one. Permanent(nil) is nil.
// [errors.Is] and [errors.As] see through the mark.
func Permanent(err error) error {
	if err == nil || IsPermanent(err) {
		return err
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked by [Permanent].
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// RetryAfter asks for the next attempt d from now instead of after the
// task's backoff (River's snooze): for work that cannot run yet and knows
// when it can (a rate limit's reset, a file not yet delivered, a remote
// Retry-After). The attempt fails with err's message and counts as one of
// the task's retry.max_attempts, like any failure, so that a handler that
// keeps asking cannot retry for ever (on the last attempt the instance
// fails); only the wait is the handler's instead of the backoff's.
//
// The dispatcher schedules the next attempt d after it records the
// failure, capped at the task's retry.max_interval_sec (default 30 min); a
// negative d is 0, which retries at once. An error marked [Permanent],
// inside or outside RetryAfter, fails without retry. RetryAfter(d, nil)
// is an error too, "retry in <d> requested", since asking for a retry is
// a failure of this attempt. [errors.Is] and [errors.As] see through it.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = fmt.Errorf("retry in %v requested", max(d, 0))
	}
	return &retryAfterError{d: max(d, 0), err: err}
}

// retryAfter returns the wait err asks for with [RetryAfter], the
// outermost one if it was wrapped twice.
func retryAfter(err error) (time.Duration, bool) {
	var r *retryAfterError
	if !errors.As(err, &r) {
		return 0, false
	}
	return r.d, true
}

type retryAfterError struct {
	d   time.Duration
	err error
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }
