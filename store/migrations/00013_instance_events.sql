-- +goose Up
-- instance_events: what befell an instance that is not a change of its state,
-- shown in its timeline beside the transitions: a report the dispatcher
-- refused as stale (kind stale_started, stale_succeeded, stale_failed), the
-- fencing at work. Written by the dispatcher only. Not part of the outbox:
-- instance_transitions stays the state machine's record and the audit
-- trail's. One row per attempt and kind, so a redelivered report adds none.
CREATE TABLE instance_events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_id bigint      NOT NULL REFERENCES instances (id),
    attempt     integer     NOT NULL,
    kind        text        NOT NULL,
    operator    text        NOT NULL DEFAULT '',
    reason      text        NOT NULL DEFAULT '',
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (instance_id, attempt, kind)
);

-- +goose Down
DROP TABLE instance_events;
