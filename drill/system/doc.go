// Package system is the engine of ax drill system, AX's reliability
// battery: it starts a [Sandbox] — a private PostgreSQL, a nats-server in a
// process of its own, and dispatcher, trigger and executor processes of the
// ax binary, all on loopback — and runs each [Scenario] against it: a
// steady load of firings whose handler ([WorkHandler]) writes every run to
// an O_APPEND ledger, and a fault (kill -9, SIGSTOP, a nats-server or
// PostgreSQL outage, …) injected meanwhile. [Run] returns a [Result] per
// scenario: what was fired, created, lost, stuck or run twice, the stale
// reports refused and accepted, the transitions the state machine forbids
// ([schemas.CanTransition]), the recovery times, and the checks of its
// verdict. A sandbox ends only the processes it started, by their pid.
//
// docs/drill.md explains every scenario and check.
package system
