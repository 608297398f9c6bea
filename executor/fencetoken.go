package executor

import "strconv"

// FenceHeader is the HTTP header that carries an attempt's fencing token
// ([Job.Fence]) to a downstream service, in decimal; see package
// [github.com/ax-scheduler/ax/executor/fencehttp].
const FenceHeader = "AX-Fence"

// Fence returns the attempt's fencing token: a number that the store the
// handler writes to can compare, to refuse the writes of an attempt that
// AX has moved on from (a worker paused past its lease, a host cut off
// from NATS) — what the instance id alone cannot tell.
//
// The token is the revision at which the worker created the attempt's
// lease in the leases bucket (ax-leases, key <instance>.<attempt>): a
// JetStream stream sequence, so it is strictly greater than the token of
// every attempt whose lease was created before, whatever its instance.
// Hence:
//   - a later attempt of the same instance has a greater token: it is
//     dispatched only once the earlier attempt's lease lapsed or ended,
//     and a redelivered dispatch message cannot make a second lease of one
//     attempt (the create is create-only);
//   - for a task with a mutex_key, the next holder of the key has a
//     greater token than the holder before it: an attempt takes the mutex
//     before it creates its lease, so a new holder's lease is created after
//     the previous holder took the key and created its own.
//
// A store that keeps the greatest token it has accepted for a resource
// and refuses a write carrying a smaller one (package
// [github.com/ax-scheduler/ax/executor/fencepg] does it in PostgreSQL,
// [github.com/ax-scheduler/ax/executor/fencehttp] for a service behind
// HTTP) thus takes no write from an attempt once a newer attempt has
// written. Writes of one attempt carry one token and are all accepted.
// The token restarts only if the leases bucket is deleted and made anew.
//
// Fence returns 0 for a Job no worker made (a test's own Job).
func (t *Job) Fence() uint64 { return t.fence }

// FenceString returns [Job.Fence] in decimal, the form of [FenceHeader].
func (t *Job) FenceString() string { return strconv.FormatUint(t.fence, 10) }
