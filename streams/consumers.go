package streams

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
)

// Consumer defaults.
const (
	// DefaultAckWait is how long a fetched message may stay un-acked before
	// JetStream delivers it again.
	DefaultAckWait = 30 * time.Second
	// DispatcherMaxAckPending bounds the dispatcher's messages in flight.
	DispatcherMaxAckPending = 20000
)

// DispatcherConsumer is the durable consumer the dispatchers share on
// AX_TRIGGERS: every firing goes to one of them.
func (t Topology) DispatcherConsumer() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       "dispatcher",
		Description:   "AX dispatchers: firings to instances",
		FilterSubject: t.subject("trigger", ">"),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       DefaultAckWait,
		MaxAckPending: DispatcherMaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// RecorderConsumer is the durable consumer the dispatchers share on
// AX_REPORTS: every report goes to one of them.
func (t Topology) RecorderConsumer() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       "recorder",
		Description:   "AX dispatchers: executor reports to instance transitions",
		FilterSubject: t.subject("report", ">"),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       DefaultAckWait,
		MaxAckPending: DispatcherMaxAckPending,
	}
}

// PoolConsumer is the durable consumer the executors of one pool share for
// one priority. Its metadata names the pool and priority so that consumer
// metrics can be labelled by them.
func (t Topology) PoolConsumer(pool string, p schemas.Priority) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       "pool_" + pool + "_" + string(p),
		Description:   "AX executors of pool " + pool + ", priority " + string(p),
		FilterSubject: t.Dispatch(pool, p),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       DefaultAckWait,
		MaxAckPending: -1,
		Metadata:      map[string]string{"ax_pool": pool, "ax_priority": string(p)},
	}
}

// WorkerConsumerInactiveThreshold is how long a worker's own consumer
// outlives the worker's last fetch: a worker that left for good takes its
// consumer with it after that long.
const WorkerConsumerInactiveThreshold = time.Hour

// WorkerConsumer is the durable consumer of one executor's own subject
// (see [Topology.DispatchWorker]), named "worker_<worker_id>". It is
// removed WorkerConsumerInactiveThreshold after the worker stopped pulling,
// together with any messages still waiting on it.
func (t Topology) WorkerConsumer(workerID string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:           "worker_" + workerID,
		Description:       "AX executor " + workerID + ": the work routed to it alone",
		FilterSubject:     t.DispatchWorker(workerID),
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           DefaultAckWait,
		MaxAckPending:     -1,
		InactiveThreshold: WorkerConsumerInactiveThreshold,
		Metadata:          map[string]string{"ax_worker": workerID},
	}
}
