-- +goose Up
-- Chains. run_id names the run an instance belongs to: a root firing starts
-- run-<its instance id>, and every task chained after it (its definition's
-- after) fires in the same run. When a parent ends, the dispatcher looks up
-- the latest instance of each of its child's parents in the run by
-- (run_id, task). Instances made before this migration keep ''.
ALTER TABLE instances ADD COLUMN run_id text NOT NULL DEFAULT '';
-- parents: how each parent of a chained task ended in the run, by parent
-- task name ({"a": {"instance_id": 1, "state": "SUCCEEDED", "output": …}});
-- NULL for an instance that no chain fired.
ALTER TABLE instances ADD COLUMN parents jsonb;
CREATE INDEX instances_run_idx ON instances (run_id, task, id);

-- task_parents: written by the api only, in the transaction that stores a
-- definition. One row per entry of the current definition's after, in its
-- order (position): the chain graph as a table, so that finding the
-- children of the tasks that ended is an index lookup with sound row
-- estimates. A parent need not exist; a deleted child takes its rows along.
CREATE TABLE task_parents (
    child    text    NOT NULL REFERENCES tasks (name) ON DELETE CASCADE,
    parent   text    NOT NULL,
    position integer NOT NULL,
    PRIMARY KEY (child, parent)
);
CREATE INDEX task_parents_parent_idx ON task_parents (parent);

INSERT INTO task_parents (child, parent, position)
SELECT t.name, a.value->>'task', a.ord - 1
FROM tasks t CROSS JOIN jsonb_array_elements(t.definition->'after') WITH ORDINALITY AS a(value, ord)
WHERE jsonb_typeof(t.definition->'after') = 'array'
ON CONFLICT DO NOTHING;

-- +goose Down
DROP TABLE task_parents;
DROP INDEX instances_run_idx;
ALTER TABLE instances DROP COLUMN parents;
ALTER TABLE instances DROP COLUMN run_id;
