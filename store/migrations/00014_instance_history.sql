-- +goose Up
-- Instance history. instances, instance_transitions and instance_events stay
-- the hot tables the dispatcher's statements read and write: live instances
-- and the ended ones of the last days (the dispatcher's history.after). The
-- leading dispatcher's maintenance loop moves older ended instances, with
-- their transitions and events, into instance_history and
-- instance_transition_history, partitioned by range of the instance's
-- fired_at (monthly by default; the loop creates partitions ahead). The hot
-- path never touches a partition: every unique index of the hot tables
-- stays as it was. See docs/architecture.md, "Instance history".
--
-- The columns of instances and instance_transitions are copied (LIKE): a
-- migration that adds a column to either adds it here too
-- (store.TestHistoryHasEveryColumn checks).
CREATE TABLE instance_history (
    LIKE instances INCLUDING DEFAULTS,
    -- events: the instance's instance_events rows, as a JSON array.
    events   jsonb       NOT NULL DEFAULT '[]',
    moved_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id, fired_at)
) PARTITION BY RANGE (fired_at);
CREATE INDEX instance_history_task_idx ON instance_history (task, fired_at);

CREATE TABLE instance_transition_history (
    LIKE instance_transitions INCLUDING DEFAULTS,
    -- fired_at: the instance's, so that its transitions share its partition.
    fired_at timestamptz NOT NULL,
    PRIMARY KEY (id, fired_at)
) PARTITION BY RANGE (fired_at);
CREATE INDEX instance_transition_history_instance_idx ON instance_transition_history (instance_id, id);

-- instance_history_keys: the (task, event_id) of every instance in
-- instance_history or instance_archive, so that a firing repeated after its
-- instance moved still makes no second one: the dispatcher's insert looks
-- its key up here (one probe of one unique index, whatever the partitions).
-- Written by the maintenance loop only; a key leaves when retention drops
-- its instance.
CREATE TABLE instance_history_keys (
    task     text        NOT NULL,
    event_id text        NOT NULL,
    id       bigint      NOT NULL,
    fired_at timestamptz NOT NULL,
    PRIMARY KEY (task, event_id)
);
CREATE INDEX instance_history_keys_fired_at_idx ON instance_history_keys (fired_at);

-- instance_archive and instance_transition_archive: where retention moves
-- the expired instances of a task with archive: true (or of every task with
-- the dispatcher's --history-archive), instead of dropping them. Cold, not
-- partitioned, never read by the hot path.
CREATE TABLE instance_archive (
    LIKE instance_history INCLUDING DEFAULTS,
    archived_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id)
);
CREATE INDEX instance_archive_task_idx ON instance_archive (task, id);
CREATE TABLE instance_transition_archive (
    LIKE instance_transition_history INCLUDING DEFAULTS,
    PRIMARY KEY (id)
);
CREATE INDEX instance_transition_archive_instance_idx ON instance_transition_archive (instance_id, id);

-- archived_instances and archived_transitions: what left the hot tables,
-- in the history or the archive, as GET /v1/instances?archived=true reads it.
CREATE VIEW archived_instances AS
    SELECT h.*, NULL::timestamptz AS archived_at FROM instance_history h
    UNION ALL
    SELECT * FROM instance_archive;
CREATE VIEW archived_transitions AS
    SELECT * FROM instance_transition_history
    UNION ALL
    SELECT * FROM instance_transition_archive;

-- +goose Down
DROP VIEW archived_transitions;
DROP VIEW archived_instances;
DROP TABLE instance_transition_archive;
DROP TABLE instance_archive;
DROP TABLE instance_history_keys;
DROP TABLE instance_transition_history;
DROP TABLE instance_history;
