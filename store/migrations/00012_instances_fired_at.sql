-- +goose Up
-- The instances of a time window, as GET /v1/instances?since=&until= lists
-- them and GET /v1/reports/summary counts them, are read by fired_at.
CREATE INDEX instances_fired_at_idx ON instances (fired_at);

-- +goose Down
DROP INDEX instances_fired_at_idx;
