-- +goose Up
-- traceparent, tracestate: the W3C Trace Context of the span that created
-- the instance (the dispatcher's ax.dispatcher.create), or '' when the
-- firing came without one and tracing is off. Every attempt's dispatch
-- span is its child: a retry scheduled from PostgreSQL, a reroute or a
-- republished attempt continues the firing's trace. The history tables
-- copy it.
ALTER TABLE instances
    ADD COLUMN traceparent text NOT NULL DEFAULT '',
    ADD COLUMN tracestate  text NOT NULL DEFAULT '';
ALTER TABLE instance_history
    ADD COLUMN traceparent text NOT NULL DEFAULT '',
    ADD COLUMN tracestate  text NOT NULL DEFAULT '';
ALTER TABLE instance_archive
    ADD COLUMN traceparent text NOT NULL DEFAULT '',
    ADD COLUMN tracestate  text NOT NULL DEFAULT '';

DROP VIEW archived_instances;
CREATE VIEW archived_instances AS
    SELECT h.*, NULL::timestamptz AS archived_at FROM instance_history h
    UNION ALL
    SELECT id, task, task_version, event_id, source, operator, state, attempt, max_attempts,
        retry_policy, priority, pool, handler, timeout_ms, payload, output, error, worker_id,
        fired_at, created_at, dispatched_at, started_at, finished_at, updated_at, mutex_template,
        run_id, parents, dispatch_strategy, dispatch_key, min_worker_version, parent_id,
        shard_index, shard_count, events, moved_at, progress, deaths, death_attempt,
        traceparent, tracestate, archived_at
    FROM instance_archive;

-- +goose Down
DROP VIEW archived_instances;
ALTER TABLE instance_archive DROP COLUMN traceparent, DROP COLUMN tracestate;
ALTER TABLE instance_history DROP COLUMN traceparent, DROP COLUMN tracestate;
ALTER TABLE instances DROP COLUMN traceparent, DROP COLUMN tracestate;
CREATE VIEW archived_instances AS
    SELECT h.*, NULL::timestamptz AS archived_at FROM instance_history h
    UNION ALL
    SELECT id, task, task_version, event_id, source, operator, state, attempt, max_attempts,
        retry_policy, priority, pool, handler, timeout_ms, payload, output, error, worker_id,
        fired_at, created_at, dispatched_at, started_at, finished_at, updated_at, mutex_template,
        run_id, parents, dispatch_strategy, dispatch_key, min_worker_version, parent_id,
        shard_index, shard_count, events, moved_at, progress, deaths, death_attempt, archived_at
    FROM instance_archive;
