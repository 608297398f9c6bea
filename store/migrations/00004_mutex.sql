-- +goose Up
-- The task's concurrency.mutex_key at the instance's creation: every attempt
-- holds the same mutex, rendered over the payload by the executor.
ALTER TABLE instances ADD COLUMN mutex_template text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE instances DROP COLUMN mutex_template;
