-- +goose Up
-- The alert rule of kind deadline_missed: a run of a task with a deadline
-- is not done by it (waiting, running or failed), among the runs fired
-- within the window (P1).
ALTER TABLE alert_rules DROP CONSTRAINT alert_rules_kind_check;
ALTER TABLE alert_rules ADD CONSTRAINT alert_rules_kind_check CHECK (kind IN ('no_live_executor', 'failing_tasks',
    'consecutive_failures', 'timeout_rate', 'backlog', 'duration_jitter', 'quarantined', 'deadline_missed'));
INSERT INTO alert_rules (name, kind, level, params) VALUES
    ('deadline_missed', 'deadline_missed', 'P1', '{"window": "48h", "throttle": "10m"}')
ON CONFLICT (name) DO NOTHING;

-- +goose Down
DELETE FROM alert_rules WHERE kind = 'deadline_missed';
ALTER TABLE alert_rules DROP CONSTRAINT alert_rules_kind_check;
ALTER TABLE alert_rules ADD CONSTRAINT alert_rules_kind_check CHECK (kind IN ('no_live_executor', 'failing_tasks',
    'consecutive_failures', 'timeout_rate', 'backlog', 'duration_jitter', 'quarantined'));
