-- +goose Up
-- limits: named limits that tasks share (schemas.Limit), applied with
-- ax limit apply. definition holds the limit as applied; the columns the
-- dispatchers' admission reads are copied out of it. A dispatcher locks a
-- limit's row (FOR UPDATE, in name order) to count and admit against it,
-- so that every dispatcher's admissions to one limit are one sequence.
CREATE TABLE limits (
    name        text PRIMARY KEY,
    definition  jsonb       NOT NULL,
    paused      boolean     NOT NULL DEFAULT false,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- instance_limits: the keys an instance counts against, one row per limit
-- its task names, written with the instance. admitted_at is when it was
-- admitted (PostgreSQL's clock; NULL while WAITING): the rate's sliding
-- window counts these. A row holds a concurrency slot while its instance
-- is DISPATCHED, RUNNING or RETRYING: the count joins instances, so every
-- path that ends an instance frees its slots without knowing of limits.
CREATE TABLE instance_limits (
    instance_id bigint      NOT NULL,
    limit_name  text        NOT NULL,
    key         text        NOT NULL,
    admitted_at timestamptz,
    PRIMARY KEY (instance_id, limit_name)
);
CREATE INDEX instance_limits_key_idx ON instance_limits (limit_name, key, admitted_at);

-- +goose Down
DROP TABLE instance_limits;
DROP TABLE limits;
