package trigger

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/store"
)

// reloadBatch is the most changed tasks reloaded in one round trip.
const reloadBatch = 1000

// reload is a set of tasks read again after their entries in the tasks
// bucket changed, for the run loop to replan.
type reload struct {
	// names lists the tasks that changed; one missing from tasks is gone.
	names  []string
	tasks  map[string]store.TaskRecord
	states map[store.TriggerKey]store.TriggerState
	// mark is the persister's mark of the states' read (see
	// persister.reading), ended by the loop once it applied them.
	mark uint64
}

// watchTasks turns the updates of the tasks bucket into reloads: it gathers
// the names that changed (a burst of changes becomes one batch), reads those
// tasks and their trigger states from the store in two queries, and hands
// them to the run loop. A store failure is logged and retried; the watcher
// closing is an error.
func (s *Service) watchTasks(ctx context.Context, w jetstream.KeyWatcher, out chan<- reload) error {
	changed := make(map[string]bool)
	// closed is the end of a watcher whose updates channel closed: nil
	// when it stopped with the context. The caller returns it at once: a
	// closed channel is always ready, so reading on would spin.
	closed := func() error {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("watch %s: watcher closed", s.top.TasksBucket())
	}
	for {
		if len(changed) == 0 {
			select {
			case <-ctx.Done():
				return nil
			case e, ok := <-w.Updates():
				if !ok {
					return closed()
				}
				if e != nil {
					changed[e.Key()] = true
				}
			}
		}
	drain:
		for len(changed) < reloadBatch {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					return closed()
				}
				if e != nil {
					changed[e.Key()] = true
				}
			default:
				break drain
			}
		}
		if len(changed) == 0 {
			continue
		}
		r, err := s.reloadTasks(ctx, changed)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.Error().Err(err).Int("tasks", len(changed)).Msg("reloading changed tasks failed; trying again")
			t := time.NewTimer(retryDelay) // the database recovers in real time
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			continue
		}
		select {
		case out <- r:
		case <-ctx.Done():
			s.persist.doneReading(r.mark)
			return nil
		}
		clear(changed)
	}
}

// reloadTasks reads the named tasks and their trigger states.
func (s *Service) reloadTasks(ctx context.Context, changed map[string]bool) (reload, error) {
	r := reload{names: make([]string, 0, len(changed)), mark: s.persist.reading()}
	for name := range changed {
		r.names = append(r.names, name)
	}
	var err error
	if r.tasks, err = s.opts.Store.GetTasks(ctx, r.names); err != nil {
		s.persist.doneReading(r.mark)
		return reload{}, err
	}
	if r.states, err = s.opts.Store.GetTriggerStates(ctx, r.names); err != nil {
		s.persist.doneReading(r.mark)
		return reload{}, err
	}
	return r, nil
}
