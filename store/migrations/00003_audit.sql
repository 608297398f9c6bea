-- +goose Up
-- The audit trail's outbox: instance_transitions (written by the dispatcher)
-- and operator_actions (written by the api), both relayed to AX_AUDIT by the
-- auditor. Each row carries the id of the transaction that wrote it (xid), so
-- that the relay can take exactly the rows of the transactions that committed
-- between two snapshots: rows appear in commit order, not id order, and a
-- cursor on ids would skip a row whose transaction commits after one that
-- took a higher id.
ALTER TABLE instance_transitions ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX instance_transitions_xid_idx ON instance_transitions (xid);
-- GET /v1/audit reads newest first.
CREATE INDEX instance_transitions_at_idx ON instance_transitions (at, id);

-- operator_actions: written by the api only, in the transaction of the change
-- it records (apply, enable, disable, …) or alone for an action that changes
-- no table (fire). instance_id is 0 for an action on a task. No foreign key:
-- the trail outlives a deleted task.
CREATE TABLE operator_actions (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action      text        NOT NULL,
    task        text        NOT NULL,
    instance_id bigint      NOT NULL DEFAULT 0,
    operator    text        NOT NULL DEFAULT '',
    reason      text        NOT NULL DEFAULT '',
    details     jsonb,
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    xid         xid8        NOT NULL DEFAULT pg_current_xact_id()
);

CREATE INDEX operator_actions_xid_idx ON operator_actions (xid);
CREATE INDEX operator_actions_at_idx ON operator_actions (at, id);
CREATE INDEX operator_actions_instance_idx ON operator_actions (instance_id, id) WHERE instance_id <> 0;

-- relay_cursor: written by the leading auditor only, on the connection that
-- holds the relay's advisory lock. Every outbox row whose transaction is
-- visible in done is on AX_AUDIT. When current is set, the rows visible in
-- current but not in done are being published, the operator actions and the
-- transitions each in id order, merged by time: those up to last_action_id
-- and last_transition_id are on AX_AUDIT.
CREATE TABLE relay_cursor (
    name               text PRIMARY KEY,
    done               pg_snapshot NOT NULL,
    current            pg_snapshot,
    last_action_id     bigint      NOT NULL DEFAULT 0,
    last_transition_id bigint      NOT NULL DEFAULT 0,
    updated_at         timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE relay_cursor;
DROP TABLE operator_actions;
DROP INDEX instance_transitions_at_idx;
DROP INDEX instance_transitions_xid_idx;
ALTER TABLE instance_transitions DROP COLUMN xid;
