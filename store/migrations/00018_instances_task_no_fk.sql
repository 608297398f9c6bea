-- +goose Up
-- instances.task keeps no foreign key to tasks. Its check ran once per
-- instance created (a query of its own through SPI, and a FOR KEY SHARE lock
-- on the task's row: a MultiXact when two batches of one task's firings
-- commit at once), the largest part of the creation statement's time after
-- its index entries, and it guarded nothing the statements do not: a task's
-- row is never deleted (a deleted task keeps it, with deleted_at set), and
-- the dispatcher creates instances only of the tasks it read. See
-- store.TestInstancesTaskMigration.
ALTER TABLE instances DROP CONSTRAINT instances_task_fkey;

-- +goose Down
ALTER TABLE instances ADD CONSTRAINT instances_task_fkey FOREIGN KEY (task) REFERENCES tasks (name);
