-- +goose Up
-- A paused task keeps its definition and its running instances, but its
-- firings make no new runs until it is resumed (see docs/execution.md).
ALTER TABLE tasks ADD COLUMN paused boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE tasks DROP COLUMN paused;
