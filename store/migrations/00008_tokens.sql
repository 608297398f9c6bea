-- +goose Up
-- api_tokens: the API's bearer tokens, written by `ax token` (directly) and
-- by the api (POST/DELETE /v1/tokens). Only the SHA-256 of a secret is kept:
-- the secret is shown once, when the token is made. A revoked token stays,
-- for the audit trail, with revoked_at set; names are unique among the
-- tokens not revoked, since a name is what the audit trail records.
CREATE TABLE api_tokens (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text        NOT NULL,
    role         text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    secret_hash  bytea       NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);

CREATE UNIQUE INDEX api_tokens_live_name_idx ON api_tokens (name) WHERE revoked_at IS NULL;

-- +goose Down
DROP TABLE api_tokens;
