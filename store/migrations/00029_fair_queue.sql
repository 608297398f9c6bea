-- +goose Up
-- fair_queue: the attempts of tasks with a dispatch.fairness key that the
-- dispatcher holds back until their queue on AX_DISPATCH (subject) has
-- room, then lets in by start-time fair queuing over the keys
-- (store.Store.ReleaseFair, dispatcher/fairness.go). Each row is the
-- dispatch message as it will be published. Written by the dispatcher only.
CREATE TABLE fair_queue (
    instance_id bigint      NOT NULL,
    attempt     integer     NOT NULL,
    subject     text        NOT NULL,
    ring        text        NOT NULL,
    msg_id      text        NOT NULL,
    fair_key    text        NOT NULL,
    weight      integer     NOT NULL DEFAULT 1 CHECK (weight > 0),
    message     bytea       NOT NULL,
    seq         bigint      GENERATED ALWAYS AS IDENTITY,
    queued_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (instance_id, attempt)
);
CREATE INDEX fair_queue_subject_idx ON fair_queue (subject, fair_key, seq);

-- fair_queues holds each queue's virtual time (the finish tag of the
-- last attempt let in), fair_clock each key's (of its own last one). A
-- key's next attempt starts at the later of the two, so a key that was
-- idle neither waits for the others' backlog nor saves up turns.
CREATE TABLE fair_queues (
    subject text             PRIMARY KEY,
    vtime   double precision NOT NULL
);
CREATE TABLE fair_clock (
    subject  text             NOT NULL,
    fair_key text             NOT NULL,
    vtime    double precision NOT NULL,
    PRIMARY KEY (subject, fair_key)
);

-- +goose Down
DROP TABLE fair_clock;
DROP TABLE fair_queues;
DROP TABLE fair_queue;
