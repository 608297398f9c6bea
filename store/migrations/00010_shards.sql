-- +goose Up
-- Sharded and broadcast firings: the firing's instance is the parent, which
-- runs no handler itself; each shard is a child instance with parent_id,
-- its shard_index and the shard_count. On the parent, shard_count is set
-- when its children are made (broadcast: one per live worker).
ALTER TABLE instances
	ADD COLUMN parent_id bigint REFERENCES instances (id),
	ADD COLUMN shard_index integer NOT NULL DEFAULT 0,
	ADD COLUMN shard_count integer NOT NULL DEFAULT 0;
CREATE INDEX instances_parent_idx ON instances (parent_id) WHERE parent_id IS NOT NULL;

-- +goose Down
DROP INDEX instances_parent_idx;
ALTER TABLE instances
	DROP COLUMN parent_id,
	DROP COLUMN shard_index,
	DROP COLUMN shard_count;
