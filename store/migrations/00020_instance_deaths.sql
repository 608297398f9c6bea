-- +goose Up
-- deaths: how many workers died (their lease expired with the attempt
-- unfinished) while running the instance, counted once per attempt
-- (death_attempt is the last attempt counted, so a reaper that counts
-- again after a crash adds none). The reaper reads it to tell the suspect
-- of a death from its innocent neighbours: a death spends no attempt, and
-- an instance that too many workers died running is quarantined (see
-- docs/execution.md, "Worker deaths"). The history tables copy it. An
-- alert rule of a new kind, quarantined, says when one was.
ALTER TABLE instances
    ADD COLUMN deaths        integer NOT NULL DEFAULT 0,
    ADD COLUMN death_attempt integer NOT NULL DEFAULT 0;
ALTER TABLE instance_history
    ADD COLUMN deaths        integer NOT NULL DEFAULT 0,
    ADD COLUMN death_attempt integer NOT NULL DEFAULT 0;
ALTER TABLE instance_archive
    ADD COLUMN deaths        integer NOT NULL DEFAULT 0,
    ADD COLUMN death_attempt integer NOT NULL DEFAULT 0;

DROP VIEW archived_instances;
CREATE VIEW archived_instances AS
    SELECT h.*, NULL::timestamptz AS archived_at FROM instance_history h
    UNION ALL
    SELECT id, task, task_version, event_id, source, operator, state, attempt, max_attempts,
        retry_policy, priority, pool, handler, timeout_ms, payload, output, error, worker_id,
        fired_at, created_at, dispatched_at, started_at, finished_at, updated_at, mutex_template,
        run_id, parents, dispatch_strategy, dispatch_key, min_worker_version, parent_id,
        shard_index, shard_count, events, moved_at, progress, deaths, death_attempt, archived_at
    FROM instance_archive;

-- The alert rule of kind quarantined: an instance of a task was
-- quarantined within the window (P1: a handler kills its process).
ALTER TABLE alert_rules DROP CONSTRAINT alert_rules_kind_check;
ALTER TABLE alert_rules ADD CONSTRAINT alert_rules_kind_check CHECK (kind IN ('no_live_executor', 'failing_tasks',
    'consecutive_failures', 'timeout_rate', 'backlog', 'duration_jitter', 'quarantined'));
INSERT INTO alert_rules (name, kind, level, params) VALUES
    ('quarantined', 'quarantined', 'P1', '{"window": "1h", "throttle": "10m"}')
ON CONFLICT (name) DO NOTHING;

-- +goose Down
DELETE FROM alert_rules WHERE kind = 'quarantined';
ALTER TABLE alert_rules DROP CONSTRAINT alert_rules_kind_check;
ALTER TABLE alert_rules ADD CONSTRAINT alert_rules_kind_check CHECK (kind IN ('no_live_executor', 'failing_tasks',
    'consecutive_failures', 'timeout_rate', 'backlog', 'duration_jitter'));
DROP VIEW archived_instances;
ALTER TABLE instance_archive DROP COLUMN deaths, DROP COLUMN death_attempt;
ALTER TABLE instance_history DROP COLUMN deaths, DROP COLUMN death_attempt;
ALTER TABLE instances DROP COLUMN deaths, DROP COLUMN death_attempt;
CREATE VIEW archived_instances AS
    SELECT h.*, NULL::timestamptz AS archived_at FROM instance_history h
    UNION ALL
    SELECT id, task, task_version, event_id, source, operator, state, attempt, max_attempts,
        retry_policy, priority, pool, handler, timeout_ms, payload, output, error, worker_id,
        fired_at, created_at, dispatched_at, started_at, finished_at, updated_at, mutex_template,
        run_id, parents, dispatch_strategy, dispatch_key, min_worker_version, parent_id,
        shard_index, shard_count, events, moved_at, progress, archived_at
    FROM instance_archive;
