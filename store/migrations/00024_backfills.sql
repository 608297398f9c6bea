-- +goose Up
-- backfills: a schedule's ticks of a past range fired again, as the trigger
-- service fires them (written by the api, which makes, pauses, resumes and
-- cancels one, and by the trigger service, which moves its cursor). A tick's
-- firing carries the cron tick's own event id, so a tick that already ran
-- (live, or by an earlier backfill) makes no second instance.
CREATE TABLE backfills (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task          text        NOT NULL,
    trigger_index integer     NOT NULL,
    from_at       timestamptz NOT NULL,
    to_at         timestamptz NOT NULL,
    priority      text        NOT NULL DEFAULT 'low',
    max_running   integer     NOT NULL DEFAULT 1 CHECK (max_running > 0),
    overlap       text        NOT NULL DEFAULT 'allow' CHECK (overlap IN ('allow', 'skip')),
    rate          double precision NOT NULL DEFAULT 10 CHECK (rate > 0),
    state         text        NOT NULL DEFAULT 'running'
                  CHECK (state IN ('running', 'paused', 'cancelled', 'done')),
    -- cursor is the latest tick handled (fired, found run, or skipped);
    -- NULL before the first.
    cursor_at     timestamptz,
    fired         integer     NOT NULL DEFAULT 0,
    existing      integer     NOT NULL DEFAULT 0,
    skipped       integer     NOT NULL DEFAULT 0,
    total         integer     NOT NULL DEFAULT 0,
    operator      text        NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX backfills_running_idx ON backfills (id) WHERE state = 'running';

-- +goose Down
DROP TABLE backfills;
