package executor

import "errors"

// ErrLeaseLost is the cause ([context.Cause]) of an attempt's context when
// the worker lost the attempt's lease: a renewal found that the lease had
// expired and been fenced, so the dispatcher has moved on to another attempt.
// The worker does not report such an attempt: its result would not count.
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
