package streams

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
)

// Consumer defaults.
const (
	// DefaultAckWait is how long a fetched message may stay un-acked before
	// JetStream delivers it again.
	DefaultAckWait = 30 * time.Second
	// MinDispatchAckWait is the least ack wait of the dispatch consumers
	// (see [DispatchAckWait]): a fetched attempt's fence question (5 s)
	// and confirmed ack must fit in it, with the executor's progress
	// signals every third of it.
	MinDispatchAckWait = 10 * time.Second
	// DispatcherMaxAckPending bounds the dispatcher's messages in flight.
	DispatcherMaxAckPending = 20000
)

// DispatchAckWait is the ack wait an executor gives the dispatch consumers
// it creates ([Topology.PoolConsumer], [Topology.WorkerConsumer]) on an
// installation whose lease TTL is leaseTTL: the TTL, at least
// [MinDispatchAckWait]. A dispatch message taken by a worker that dies
// before it acks comes back that long after, about when the reaper retries
// the attempts the worker had started, not after [DefaultAckWait]
// whatever the TTL. The executor tells JetStream every third of the ack
// wait that a message it holds is still being worked on.
func DispatchAckWait(leaseTTL time.Duration) time.Duration {
	return max(leaseTTL, MinDispatchAckWait)
}

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

// FiringsConsumer is the durable consumer the dispatchers share on
// AX_FIRINGS: every firing of AX's own services goes to one of them.
func (t Topology) FiringsConsumer() jetstream.ConsumerConfig {
	c := t.DispatcherConsumer()
	c.Description = "AX dispatchers: AX's own firings to instances"
	c.FilterSubject = t.subject("fire", ">")
	return c
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

// PoolConsumer is the durable consumer that the executors of one pool
// that registered handler share for one priority, on
// [Topology.Dispatch]: every such executor pulls it, no other does. Its
// name is "pool_<pool>_<priority>_<handler>", '.' of the handler written
// '_', with a hash of the three appended so that no two queues share a
// name; its metadata names the pool, priority and handler so that
// consumer metrics can be labelled by them.
//
// Executors create it when they start, if it is not there, with the ack
// wait of [DispatchAckWait], and never update it: its settings are the
// topology's.
func (t Topology) PoolConsumer(pool string, p schemas.Priority, handler string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       PoolConsumerName(pool, p, handler),
		Description:   "AX executors of pool " + pool + " with handler " + handler + ", priority " + string(p),
		FilterSubject: t.Dispatch(pool, p, handler),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       DefaultAckWait,
		MaxAckPending: -1,
		Metadata:      map[string]string{"ax_pool": pool, "ax_priority": string(p), "ax_handler": handler},
	}
}

// maxReadableName bounds the readable part of a consumer name; the
// server takes names of up to 255 characters.
const maxReadableName = 200

// PoolConsumerName is the durable name of [Topology.PoolConsumer].
func PoolConsumerName(pool string, p schemas.Priority, handler string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(pool + "\x00" + string(p) + "\x00" + handler))
	readable := "pool_" + pool + "_" + string(p) + "_" + strings.ReplaceAll(handler, ".", "_")
	if len(readable) > maxReadableName {
		readable = readable[:maxReadableName]
	}
	return readable + "_" + fmt.Sprintf("%08x", h.Sum32())
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
