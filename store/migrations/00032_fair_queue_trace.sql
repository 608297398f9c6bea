-- +goose Up
-- fair_queue.traceparent: the W3C traceparent of the span that routed the
-- held attempt (the dispatcher's ax.dispatcher.dispatch), which its
-- dispatch message carries when it is released, so that the executor's
-- span of the attempt is that span's child. '' for an attempt held without
-- one, or before this column: its release falls back to the instance's.
ALTER TABLE fair_queue ADD COLUMN traceparent text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE fair_queue DROP COLUMN traceparent;
