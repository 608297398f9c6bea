-- +goose Up
-- ax_task_changed refuses the statement that calls it: the creation
-- statement calls it for a firing made from a task's row as it was read
-- (its xmin, the NewInstance's TaskStamp) when the row has changed since,
-- so that a dispatcher that keeps the tasks it read never creates an
-- instance from a definition, or a paused, disabled, shadow or deleted flag,
-- that is no longer the task's (store.IsTaskChanged; see
-- store.TestCreateInstancesRefusesAChangedTask).
-- +goose StatementBegin
CREATE FUNCTION ax_task_changed(task text) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
	RAISE EXCEPTION 'task % changed since it was read', task
		USING ERRCODE = 'AXT01', HINT = 'read the task again and create its instances anew';
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION ax_task_changed(text);
