-- +goose Up
-- trigger_state: written by the trigger service only. One row per cron
-- trigger (the task and the trigger's index in its definition's triggers):
-- last_tick is the latest tick the trigger settled, fired or skipped by its
-- misfire policy (when a trigger is first planned, the instant it came into
-- being), so that a restarted service knows which ticks it missed. Every
-- replica writes the same rows; last_tick only ever grows (GREATEST).
CREATE TABLE trigger_state (
    task          text        NOT NULL REFERENCES tasks (name) ON DELETE CASCADE,
    trigger_index integer     NOT NULL,
    schedule      text        NOT NULL,
    timezone      text        NOT NULL,
    last_tick     timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task, trigger_index)
);

-- +goose Down
DROP TABLE trigger_state;
