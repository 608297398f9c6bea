-- +goose Up
-- calendar_waits: why a WAITING instance of a task with calendar-aligned
-- dependencies (after entries with a window) still waits: the parents'
-- ticks of its window that have not succeeded, as the dispatcher's
-- calendar loop last found them. Written by the dispatcher only; a row
-- goes when its instance leaves WAITING.
CREATE TABLE calendar_waits (
    instance_id bigint      PRIMARY KEY,
    task        text        NOT NULL,
    reason      text        NOT NULL,
    missing     integer     NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE calendar_waits;
