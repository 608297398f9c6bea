-- +goose Up
-- GET /v1/instances?archived=true lists the history and the archive newest
-- first (ORDER BY id DESC LIMIT n), filtered by task, state or both. The
-- history's only index beside its primary key was (task, fired_at), so a
-- filter that matched few rows read every partition in id order to the
-- end: 430-624 ms with 1 M instances in the history, growing with it.
-- Each filter gets an index that ends in id, so that every partition's scan
-- starts at its first match and the merge stops at the limit
-- (store.TestArchivedListUsesAnIndexForEveryFilter checks the plans). Only
-- the history mover and retention write these tables, in bulk: the hot
-- path pays nothing. On an installation with a large history, building
-- them takes a while once (about a minute per 10 M instances).
CREATE INDEX instance_history_task_id_idx ON instance_history (task, id);
CREATE INDEX instance_history_state_id_idx ON instance_history (state, id);
CREATE INDEX instance_history_task_state_id_idx ON instance_history (task, state, id);
CREATE INDEX instance_archive_state_id_idx ON instance_archive (state, id);
CREATE INDEX instance_archive_task_state_id_idx ON instance_archive (task, state, id);
CREATE INDEX instance_archive_fired_at_idx ON instance_archive (fired_at);

-- +goose Down
DROP INDEX instance_archive_fired_at_idx;
DROP INDEX instance_archive_task_state_id_idx;
DROP INDEX instance_archive_state_id_idx;
DROP INDEX instance_history_task_state_id_idx;
DROP INDEX instance_history_state_id_idx;
DROP INDEX instance_history_task_id_idx;
