-- +goose Up
-- A task in shadow mode (ax shadow start) fires on its schedules, and each
-- firing is recorded as a SHADOW instance that no worker runs, until the
-- cut-over (see docs/migrate.md). shadow_since is when it last entered
-- shadow mode, NULL outside it.
ALTER TABLE tasks ADD COLUMN shadow boolean NOT NULL DEFAULT false,
	ADD COLUMN shadow_since timestamptz;

-- +goose Down
ALTER TABLE tasks DROP COLUMN shadow, DROP COLUMN shadow_since;
