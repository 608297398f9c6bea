package drill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/streams"
)

// cleanupTimeout bounds a rehearsal's clean-up once it ended, however its
// context ended.
const cleanupTimeout = 30 * time.Second

// RemoveTasks ends a rehearsal's tasks: it cancels their instances that
// have not ended and deletes the tasks, so that the installation's task
// list is as it was (the instances stay in the history, under task types
// the alert rules, health report and summary leave out). It goes on past
// an error and returns them all.
func RemoveTasks(ctx context.Context, client *apiclient.Client, tasks []string) error {
	var errs []error
	for _, task := range tasks {
		live, err := client.ListInstances(ctx, apiclient.InstanceQuery{Task: task, Limit: 500})
		if err != nil {
			errs = append(errs, fmt.Errorf("list the instances of %s: %w", task, err))
		}
		for _, in := range live {
			if in.State.Terminal() {
				continue
			}
			if _, err := client.Cancel(ctx, in.ID, "the rehearsal ended"); err != nil {
				errs = append(errs, fmt.Errorf("cancel instance %d of %s: %w", in.ID, task, err))
			}
		}
		if _, err := client.DeleteTask(ctx, task); err != nil {
			errs = append(errs, fmt.Errorf("delete task %s: %w", task, err))
		}
	}
	return errors.Join(errs...)
}

// removeWorkers removes from NATS what a rehearsal's own executors left:
// the consumers of pool on AX_DISPATCH and its workers' own consumers,
// with the messages still on their subjects, and the workers' keys
// (heartbeats and grants) in the workers bucket. nc must be a user that
// may delete consumers and keys (a dispatcher's). Run it once the
// workers stopped.
func removeWorkers(ctx context.Context, nc *nats.Conn, top streams.Topology, pool string, workers []string) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	stream, err := js.Stream(ctx, top.DispatchStream())
	if err != nil {
		return fmt.Errorf("look up stream %s: %w", top.DispatchStream(), err)
	}
	var errs []error
	names := stream.ListConsumers(ctx)
	var doomed []string
	for ci := range names.Info() {
		if ci.Config.Metadata["ax_pool"] == pool || slices.Contains(workers, ci.Config.Metadata["ax_worker"]) {
			doomed = append(doomed, ci.Name)
		}
	}
	if err := names.Err(); err != nil {
		errs = append(errs, fmt.Errorf("list the consumers of %s: %w", top.DispatchStream(), err))
	}
	for _, name := range doomed {
		if err := stream.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			errs = append(errs, fmt.Errorf("delete consumer %s: %w", name, err))
		}
	}
	subjects := []string{top.Dispatch(pool, "*", ">")}
	for _, w := range workers {
		subjects = append(subjects, top.DispatchWorker(w))
	}
	for _, s := range subjects {
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject(s)); err != nil {
			errs = append(errs, fmt.Errorf("purge %s: %w", s, err))
		}
	}
	kv, err := js.KeyValue(ctx, top.WorkersBucket())
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("look up bucket %s: %w", top.WorkersBucket(), err))...)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list bucket %s: %w", top.WorkersBucket(), err))...)
	}
	for key := range keys.Keys() {
		id, _, _, grant := streams.ParseGrantKey(key)
		if !grant {
			id = key
		}
		if slices.Contains(workers, id) {
			if err := kv.Purge(ctx, key); err != nil {
				errs = append(errs, fmt.Errorf("purge key %s of %s: %w", key, top.WorkersBucket(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// end stops the drill's executors and, unless Keep, removes what the
// drill made: its task copies, then its executors' consumers and keys
// (with the dispatch connection; without one they are left to expire).
// What it did goes into the report as the fact "clean-up".
func (d *taskDrill) end(ctx context.Context) {
	d.stopExecutors()
	if d.opts.Keep {
		d.report.Fact("clean-up", "kept (--keep): the task copies, the drill executors' consumers and keys")
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var tasks []string
	for _, kind := range []string{kindBase, kindCrash, kindJitter, kindStorm} {
		if name, ok := d.names[kind]; ok {
			tasks = append(tasks, name)
		}
	}
	errs := []error{RemoveTasks(ctx, d.opts.Client, tasks)}
	if d.opts.Dispatch != nil {
		d.mu.Lock()
		var ids []string
		for _, x := range d.executors {
			ids = append(ids, x.id)
		}
		d.mu.Unlock()
		errs = append(errs, removeWorkers(ctx, d.opts.Dispatch, d.opts.Topology, Pool, ids))
	}
	if err := errors.Join(errs...); err != nil {
		d.report.Fact("clean-up", "incomplete: "+err.Error())
		return
	}
	d.report.Fact("clean-up", fmt.Sprintf("removed the %d task copies and the drill executors' consumers and keys (--keep leaves them)", len(tasks)))
}
