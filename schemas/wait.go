package schemas

import "time"

// WaitKind names why an instance waits (see [Wait]).
type WaitKind string

// The wait kinds.
const (
	// WaitNoWorker: routing found no live worker that may take the
	// attempt (pool, handler, min_worker_version, protocol, grant); the
	// dispatcher routes it again every few seconds.
	WaitNoWorker WaitKind = "no_worker"
	// WaitUnservedPool: the attempt sits in its pool's queue and no live
	// worker of the pool registered its handler.
	WaitUnservedPool WaitKind = "unserved_pool"
	// WaitWorkerGone: the attempt is pinned to a worker that is not live;
	// it waits in that worker's queue for it to come back.
	WaitWorkerGone WaitKind = "worker_gone"
	// WaitNoBroadcastWorker: a broadcast firing found no live worker to
	// run it on.
	WaitNoBroadcastWorker WaitKind = "no_broadcast_worker"
	// WaitMutex: another attempt holds the task's mutex_key.
	WaitMutex WaitKind = "mutex"
	// WaitMaxRunning: the instance is WAITING behind the task's
	// max_running_instances.
	WaitMaxRunning WaitKind = "max_running"
	// WaitCalendarParents: the instance is WAITING for the ticks of its
	// calendar-aligned parents (a task's after entries with a window).
	WaitCalendarParents WaitKind = "calendar_parents"
	// WaitLimit: the instance is WAITING for a named limit its task names
	// (the reason names the limit and key).
	WaitLimit WaitKind = "limit"
)

// Wait is why an instance that has not started waits: kept on the
// instance while it waits, shown by the API, the CLI and the console.
type Wait struct {
	Kind WaitKind `json:"kind"`
	// Reason says what holds the instance, in words.
	Reason string `json:"reason"`
	// Ends says what would end the wait (start an executor …).
	Ends string `json:"ends,omitempty"`
	// Since is when the reason was first seen for this attempt.
	Since time.Time `json:"since"`
}

// Waits reports whether an instance in state s has not started and may
// wait: CREATED, WAITING, DISPATCHED or RETRYING.
func (s State) Waits() bool {
	switch s {
	case StateCreated, StateWaiting, StateDispatched, StateRetrying:
		return true
	}
	return false
}
