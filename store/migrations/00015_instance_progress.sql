-- +goose Up
-- progress: the latest progress report of the instance's attempt,
-- {"attempt", "done", "total", "message", "at"}, or NULL when none came.
-- Written by the dispatcher's report batches alone, one UPDATE of this
-- column per batch (no index covers it, so the update is HOT when the page
-- has room); it is not a transition and is not audited. See
-- docs/execution.md, "Progress".
ALTER TABLE instances ADD COLUMN progress jsonb;
ALTER TABLE instance_history ADD COLUMN progress jsonb;
ALTER TABLE instance_archive ADD COLUMN progress jsonb;

-- The view lists instance_archive's columns by name: their order is no
-- longer instance_history's followed by archived_at.
DROP VIEW archived_instances;
CREATE VIEW archived_instances AS
    SELECT h.*, NULL::timestamptz AS archived_at FROM instance_history h
    UNION ALL
    SELECT id, task, task_version, event_id, source, operator, state, attempt, max_attempts,
        retry_policy, priority, pool, handler, timeout_ms, payload, output, error, worker_id,
        fired_at, created_at, dispatched_at, started_at, finished_at, updated_at, mutex_template,
        run_id, parents, dispatch_strategy, dispatch_key, min_worker_version, parent_id,
        shard_index, shard_count, events, moved_at, progress, archived_at
    FROM instance_archive;

-- +goose Down
DROP VIEW archived_instances;
ALTER TABLE instance_archive DROP COLUMN progress;
ALTER TABLE instance_history DROP COLUMN progress;
ALTER TABLE instances DROP COLUMN progress;
CREATE VIEW archived_instances AS
    SELECT h.*, NULL::timestamptz AS archived_at FROM instance_history h
    UNION ALL
    SELECT * FROM instance_archive;
