-- +goose Up
-- instance_transitions.instance_id keeps no foreign key to instances. The
-- key's check ran once per transition row (a query of its own, and a lock on
-- the instance's new row version written to the WAL), four times per
-- instance of a burst, and guarded nothing the statements do not guarantee:
-- every statement that inserts a transition takes its instance_id from the
-- instances row it inserts or updates in the same statement, so under that
-- row's lock, and the one statement that deletes instances (the move to the
-- history) takes the same lock and deletes their transitions in the same
-- transaction. See store.TestTransitionsHaveTheirInstance.
ALTER TABLE instance_transitions DROP CONSTRAINT instance_transitions_instance_id_fkey;

-- +goose Down
ALTER TABLE instance_transitions ADD CONSTRAINT instance_transitions_instance_id_fkey
    FOREIGN KEY (instance_id) REFERENCES instances (id);
