// Package monitor is the auditor's monitoring: the fleet metrics, the alert
// rules and their notifications. One monitor at a time leads, holding a
// PostgreSQL advisory lock of its own (see [store.Store.AcquireMonitor]), so
// it may lead on another auditor than the outbox relay (package
// auditor/relay) does; [Service.Monitoring] tells whether this one does.
//
// The monitor reads three sources. The audit trail, through the durable
// consumer [MonitorConsumer] on AX_AUDIT: every transition is counted once
// (attempts and their outcomes, timeouts, lease expiries, retries, ended
// instances, the latency histograms, whose start times it reads from
// PostgreSQL in one query per batch) and feeds the rules about failures in a
// row and run durations. The ax-workers bucket, watched: slots and busy slots
// per pool and worker, and a worker's key expiring (a purge marker) rather
// than being deleted counts as a lost heartbeat. And PostgreSQL, every
// Options.RefreshInterval: the live instances by state, the backlog, and the
// rules over a state (no live executor in a pool, many tasks failing,
// timeout rate, backlog). Every judgement is read from PostgreSQL, so a new
// leader judges alike. Alerts and their notification throttle live in
// PostgreSQL too; a notification is claimed there before a goroutine of its
// own sends it to every channel (a webhook, a WeCom robot, a Slack webhook;
// see [Notification]). The metrics are registered with Options.Metrics;
// docs/operations.md lists them.
package monitor
