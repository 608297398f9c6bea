-- +goose Up
-- decisions: what AX's services decided that is no transition of an
-- instance, so that "why didn't it run?" has an answer read from a record
-- (ax explain): today the trigger's misfire decisions - the ticks of a
-- trigger it found missed (the service was down or stalled, the task was
-- paused or disabled), what its policy fired and what it skipped. Written
-- by the trigger service (store.Store.RecordDecisions), once per replica
-- that decided (actor); at is the deciding service's clock. Rows are few
-- (one per run of missed ticks), so they have no retention of their own.
CREATE TABLE decisions (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task          text        NOT NULL,
    trigger_index integer     NOT NULL DEFAULT 0,
    instance_id   bigint      NOT NULL DEFAULT 0,
    kind          text        NOT NULL,
    first_tick    timestamptz NOT NULL,
    last_tick     timestamptz NOT NULL,
    actor         text        NOT NULL DEFAULT '',
    reason        text        NOT NULL DEFAULT '',
    at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (task, trigger_index, kind, last_tick, actor)
);
CREATE INDEX decisions_task_idx ON decisions (task, last_tick);

-- +goose Down
DROP TABLE decisions;
