-- +goose Up
-- A row of instance_transitions may hold two transitions that one statement
-- made, one after the other: the creation's →CREATED and CREATED→state, and a
-- final report's DISPATCHED→RUNNING and RUNNING→end when one statement records
-- both. The second transition is from to_state to then_state, by
-- then_operator with then_reason, at the same attempt and time, and its id is
-- the row's id + 1: ids are drawn two at a time (INCREMENT BY 2), so the id
-- after a row's is never another row's. A row whose then_state is NULL holds
-- one transition, as every row written before this migration does. Half the
-- rows and index entries per instance of a burst, and every transition keeps
-- its own id, record and place in the audit trail: readers expand a row with
-- instance_transition_log (below), or as store's relay and audit listing do.
ALTER TABLE instance_transitions
    ADD COLUMN then_state text,
    ADD COLUMN then_operator text,
    ADD COLUMN then_reason text;
ALTER TABLE instance_transitions ALTER COLUMN id SET INCREMENT BY 2;
ALTER TABLE instance_transition_history
    ADD COLUMN then_state text,
    ADD COLUMN then_operator text,
    ADD COLUMN then_reason text;
ALTER TABLE instance_transition_archive
    ADD COLUMN then_state text,
    ADD COLUMN then_operator text,
    ADD COLUMN then_reason text;

-- instance_transition_log: every transition of the hot table, one row each.
CREATE VIEW instance_transition_log AS
    SELECT id, instance_id, task, from_state, to_state, attempt, operator, reason, at, xid
    FROM instance_transitions
    UNION ALL
    SELECT id + 1, instance_id, task, to_state, then_state, attempt, then_operator, COALESCE(then_reason, ''), at, xid
    FROM instance_transitions WHERE then_state IS NOT NULL;

-- archived_transitions: every transition that left the hot table, one row each.
DROP VIEW archived_transitions;
CREATE VIEW archived_transitions AS
    SELECT id, instance_id, task, from_state, to_state, attempt, operator, reason, at, xid, fired_at
    FROM instance_transition_history
    UNION ALL
    SELECT id + 1, instance_id, task, to_state, then_state, attempt, then_operator, COALESCE(then_reason, ''), at, xid, fired_at
    FROM instance_transition_history WHERE then_state IS NOT NULL
    UNION ALL
    SELECT id, instance_id, task, from_state, to_state, attempt, operator, reason, at, xid, fired_at
    FROM instance_transition_archive
    UNION ALL
    SELECT id + 1, instance_id, task, to_state, then_state, attempt, then_operator, COALESCE(then_reason, ''), at, xid, fired_at
    FROM instance_transition_archive WHERE then_state IS NOT NULL;

-- +goose Down
-- Each second transition becomes a row of its own again, with id + 1.
DROP VIEW archived_transitions;
DROP VIEW instance_transition_log;
INSERT INTO instance_transitions (id, instance_id, task, from_state, to_state, attempt, operator, reason, at, xid)
OVERRIDING SYSTEM VALUE
SELECT id + 1, instance_id, task, to_state, then_state, attempt, then_operator, COALESCE(then_reason, ''), at, xid
FROM instance_transitions WHERE then_state IS NOT NULL;
INSERT INTO instance_transition_history (id, instance_id, task, from_state, to_state, attempt, operator, reason, at, xid, fired_at)
SELECT id + 1, instance_id, task, to_state, then_state, attempt, then_operator, COALESCE(then_reason, ''), at, xid, fired_at
FROM instance_transition_history WHERE then_state IS NOT NULL;
INSERT INTO instance_transition_archive (id, instance_id, task, from_state, to_state, attempt, operator, reason, at, xid, fired_at)
SELECT id + 1, instance_id, task, to_state, then_state, attempt, then_operator, COALESCE(then_reason, ''), at, xid, fired_at
FROM instance_transition_archive WHERE then_state IS NOT NULL;
ALTER TABLE instance_transition_archive DROP COLUMN then_state, DROP COLUMN then_operator, DROP COLUMN then_reason;
ALTER TABLE instance_transition_history DROP COLUMN then_state, DROP COLUMN then_operator, DROP COLUMN then_reason;
ALTER TABLE instance_transitions DROP COLUMN then_state, DROP COLUMN then_operator, DROP COLUMN then_reason;
ALTER TABLE instance_transitions ALTER COLUMN id SET INCREMENT BY 1;
-- The next id after every id that a second transition had.
SELECT setval(pg_get_serial_sequence('instance_transitions', 'id'), GREATEST(
    (SELECT last_value FROM instance_transitions_id_seq),
    (SELECT COALESCE(max(id), 1) FROM instance_transitions),
    (SELECT COALESCE(max(id), 1) FROM instance_transition_history),
    (SELECT COALESCE(max(id), 1) FROM instance_transition_archive)));
CREATE VIEW archived_transitions AS
    SELECT * FROM instance_transition_history
    UNION ALL
    SELECT * FROM instance_transition_archive;
