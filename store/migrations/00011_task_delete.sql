-- +goose Up
-- A deleted task keeps its row, its versions and its instances' history; it
-- leaves every list and takes no firings. Applying the name again revives it
-- as a new version.
ALTER TABLE tasks ADD COLUMN deleted_at timestamptz;

-- +goose Down
ALTER TABLE tasks DROP COLUMN deleted_at;
