-- +goose Up
-- Alerting. alert_rules and alert_channels are written by the api (operators
-- change them); alerts by the auditor that leads monitoring, and by the api
-- when an operator acknowledges one.

-- alert_rules: what the auditor looks for. kind selects the check and the
-- keys params may hold (see store.AlertParams); every rule may also set
-- throttle, the least time between two notifications of one alert (default
-- 10m). The defaults below cover the three levels: P0 pages someone now, P1
-- wants attention today, P2 is a trend to look at.
CREATE TABLE alert_rules (
    name       text PRIMARY KEY,
    kind       text        NOT NULL CHECK (kind IN ('no_live_executor', 'failing_tasks', 'consecutive_failures',
                                                    'timeout_rate', 'backlog', 'duration_jitter')),
    level      text        NOT NULL CHECK (level IN ('P0', 'P1', 'P2')),
    params     jsonb       NOT NULL DEFAULT '{}',
    enabled    boolean     NOT NULL DEFAULT true,
    updated_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO alert_rules (name, kind, level, params) VALUES
    ('no_live_executor',     'no_live_executor',     'P0', '{"throttle": "10m"}'),
    ('failing_tasks',        'failing_tasks',        'P0', '{"tasks": 5, "window": "10m", "throttle": "10m"}'),
    ('consecutive_failures', 'consecutive_failures', 'P1', '{"failures": 3, "throttle": "10m"}'),
    ('timeout_rate',         'timeout_rate',         'P1', '{"rate": 0.2, "window": "15m", "min_attempts": 5, "throttle": "10m"}'),
    ('backlog',              'backlog',              'P2', '{"instances": 10, "age": "5m", "throttle": "10m"}'),
    ('duration_jitter',      'duration_jitter',      'P2', '{"runs": 20, "factor": 2, "throttle": "10m"}');

-- alert_channels: where notifications go. Every channel gets every
-- notification, in the payload shape of its kind.
CREATE TABLE alert_channels (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind       text        NOT NULL CHECK (kind IN ('webhook', 'wecom', 'slack')),
    url        text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- alerts: one row per episode of a rule's condition for one key (a task, a
-- pool, or '' for a fleet-wide rule). An episode is open (firing, or acked by
-- an operator: still true, no more notifications) until the condition no
-- longer holds (resolved); the next occurrence opens a new row. count is how
-- often the condition was seen in the episode; notified_count what count was
-- at the last notification, so a notification can say how many repeats it
-- groups.
CREATE TABLE alerts (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    rule             text        NOT NULL REFERENCES alert_rules (name) ON DELETE CASCADE,
    level            text        NOT NULL,
    key              text        NOT NULL,
    task             text        NOT NULL DEFAULT '',
    instance_id      bigint      NOT NULL DEFAULT 0,
    reason           text        NOT NULL,
    state            text        NOT NULL CHECK (state IN ('firing', 'acked', 'resolved')),
    count            integer     NOT NULL DEFAULT 1,
    notified_count   integer     NOT NULL DEFAULT 0,
    first_seen       timestamptz NOT NULL,
    last_seen        timestamptz NOT NULL,
    last_notified_at timestamptz,
    resolved_at      timestamptz,
    acked_by         text        NOT NULL DEFAULT '',
    acked_at         timestamptz
);

-- At most one open episode per rule and key.
CREATE UNIQUE INDEX alerts_open_idx ON alerts (rule, key) WHERE state <> 'resolved';
CREATE INDEX alerts_state_idx ON alerts (state, id DESC);

-- +goose Down
DROP TABLE alerts;
DROP TABLE alert_channels;
DROP TABLE alert_rules;
