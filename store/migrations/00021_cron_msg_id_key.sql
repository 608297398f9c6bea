-- +goose Up
-- cron_msg_id_key: the secret of the cron firings' Nats-Msg-Id (one row,
-- made by the server here, never written again). A cron firing goes to
-- AX_TRIGGERS, whose duplicate window it shares with outside publishers:
-- its message id is <task>/ and an HMAC of its event id under this key,
-- which every trigger service replica reads at start and no outside
-- publisher (who has NATS, never PostgreSQL) can compute first. Two
-- replicas' firings of one tick then carry the same id and collapse.
CREATE TABLE cron_msg_id_key (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    key text    NOT NULL
);
INSERT INTO cron_msg_id_key (key)
    VALUES (replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''));

-- +goose Down
DROP TABLE cron_msg_id_key;
