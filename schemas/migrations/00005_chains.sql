-- +goose Up
-- Chains. run_id names the run an instance belongs to: a root firing starts
-- run-<its instance id>, and every task chained after it (its definition's
-- after) fires in the same run. The dispatcher looks a run's instances up by
-- (run_id, task) when a parent ends, to see whether the child's other
-- parents have ended too. Instances made before this migration keep ''.
ALTER TABLE instances ADD COLUMN run_id text NOT NULL DEFAULT '';
-- parents: how each parent of a chained task ended in the run, by parent
-- task name ({"a": {"instance_id": 1, "state": "SUCCEEDED", "output": …}});
-- NULL for an instance that no chain fired.
ALTER TABLE instances ADD COLUMN parents jsonb;
CREATE INDEX instances_run_idx ON instances (run_id, task, id);

-- The children of a task are the tasks whose after names it: found by
-- containment (definition->'after' @> '[{"task": "a"}]').
CREATE INDEX tasks_after_idx ON tasks USING gin ((definition -> 'after') jsonb_path_ops);

-- +goose Down
DROP INDEX tasks_after_idx;
DROP INDEX instances_run_idx;
ALTER TABLE instances DROP COLUMN parents;
ALTER TABLE instances DROP COLUMN run_id;
