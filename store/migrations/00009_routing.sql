-- +goose Up
-- The routing facts of the task at the instance's creation, so that every
-- attempt routes the same way: dispatch.strategy, its key (the hash_key
-- template for "hash", the worker id for "worker") and min_worker_version.
ALTER TABLE instances
	ADD COLUMN dispatch_strategy text NOT NULL DEFAULT 'pull',
	ADD COLUMN dispatch_key text NOT NULL DEFAULT '',
	ADD COLUMN min_worker_version text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE instances
	DROP COLUMN dispatch_strategy,
	DROP COLUMN dispatch_key,
	DROP COLUMN min_worker_version;
