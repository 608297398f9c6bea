-- +goose Up
-- The WAITING instances of each task, oldest first: what the look after
-- every batch of ends asks (does a task of the batch have a firing waiting
-- for a slot of max_running_instances?), and the promotion's pick. With
-- only the live instances' index (on state) and the task's index on
-- (task, id), the planner, on the statistics of a table that grows in a
-- burst, ANDed the two bitmaps with the task's first: every instance of the
-- task that the hot table holds, ended ones included, read for each batch
-- (31,000 index entries in a burst of 20,000; those of --history-after on
-- a busy task). No row enters this index but a WAITING one: a burst's
-- instances cost it a check of the predicate.
CREATE INDEX instances_waiting_idx ON instances (task, id) WHERE state = 'WAITING';

-- +goose Down
DROP INDEX instances_waiting_idx;
