-- +goose Up
-- tasks: written by the api only. One row per task; every apply that changes
-- the definition raises version and keeps the old one in task_versions.
CREATE TABLE tasks (
    name        text PRIMARY KEY,
    version     integer     NOT NULL,
    definition  jsonb       NOT NULL,
    enabled     boolean     NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE task_versions (
    name        text        NOT NULL REFERENCES tasks (name),
    version     integer     NOT NULL,
    definition  jsonb       NOT NULL,
    operator    text        NOT NULL DEFAULT '',
    applied_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version)
);

-- instances: written by the dispatcher only. One row per (task, event_id):
-- a redelivered or double-fired trigger can never make a second instance.
-- The execution settings are copied from the task version at creation, so
-- every attempt of an instance runs under the same rules.
CREATE TABLE instances (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task          text        NOT NULL REFERENCES tasks (name),
    task_version  integer     NOT NULL,
    event_id      text        NOT NULL,
    source        text        NOT NULL,
    operator      text        NOT NULL DEFAULT '',
    state         text        NOT NULL,
    attempt       integer     NOT NULL DEFAULT 1,
    max_attempts  integer     NOT NULL,
    retry_policy  jsonb       NOT NULL DEFAULT '{}',
    priority      text        NOT NULL,
    pool          text        NOT NULL,
    handler       text        NOT NULL,
    timeout_ms    bigint      NOT NULL,
    payload       jsonb,
    output        jsonb,
    error         text        NOT NULL DEFAULT '',
    worker_id     text        NOT NULL DEFAULT '',
    fired_at      timestamptz NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    dispatched_at timestamptz,
    started_at    timestamptz,
    finished_at   timestamptz,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (task, event_id)
);

CREATE INDEX instances_task_id_idx ON instances (task, id DESC);
CREATE INDEX instances_live_idx ON instances (state)
    WHERE state IN ('CREATED', 'WAITING', 'DISPATCHED', 'RUNNING', 'RETRYING');

-- instance_transitions: every state change, inserted in the transaction that
-- makes it; the audit trail and the outbox relayed to AX_AUDIT.
CREATE TABLE instance_transitions (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_id bigint      NOT NULL REFERENCES instances (id),
    task        text        NOT NULL,
    from_state  text,
    to_state    text        NOT NULL,
    attempt     integer     NOT NULL,
    operator    text        NOT NULL,
    reason      text        NOT NULL DEFAULT '',
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX instance_transitions_instance_idx ON instance_transitions (instance_id, id);

-- +goose Down
DROP TABLE instance_transitions;
DROP TABLE instances;
DROP TABLE task_versions;
DROP TABLE tasks;
