-- +goose Up
-- instance_waits: why a live instance waits, where the operator reads it
-- (GET /v1/instances/{id}, ax instance get, the console). One row per
-- instance that waited, written by the dispatcher only when the reason
-- changes (a wait rerouted each 2 s writes once), never on the hot path
-- of an attempt that routes. attempt is the attempt the reason is about:
-- readers show a row only while the instance is still at that attempt and
-- in a waiting state, so a row left behind is harmless; the dispatcher
-- prunes rows of instances that no longer wait when it writes one.
CREATE TABLE instance_waits (
    instance_id bigint      PRIMARY KEY,
    attempt     integer     NOT NULL,
    kind        text        NOT NULL,
    reason      text        NOT NULL,
    ends        text        NOT NULL DEFAULT '',
    since       timestamptz NOT NULL
);

-- +goose Down
DROP TABLE instance_waits;
