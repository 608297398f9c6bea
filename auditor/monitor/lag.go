package monitor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/streams"
)

// Metadata keys of the dispatch consumers (see streams.Topology.PoolConsumer)
// by which the lag of a pool and priority is summed, whatever the
// consumers are called.
const (
	metaPool     = "ax_pool"
	metaPriority = "ax_priority"
)

// LagStreams returns the streams of top whose durable consumers the
// monitoring auditor reports on (ax_consumer_*): every stream AX consumes
// through durable consumers. AX_LOGS has none; its readers are ephemeral.
func LagStreams(top streams.Topology) []string {
	return []string{top.TriggersStream(), top.FiringsStream(), top.DispatchStream(), top.ReportsStream(), top.AuditStream()}
}

// lag reads the consumers of the LagStreams every LagInterval and sets the
// consumer and pool gauges. It is used by the goroutine of loop only.
type lag struct {
	*Service
	js      jetstream.JetStream
	streams map[string]jetstream.Stream
	// the series each gauge has, to delete those that go.
	consumerSeries, poolSeries, slotSeries map[string]bool
}

// loop refreshes the lag gauges at once and then every LagInterval until
// ctx ends. A failed refresh is logged; the next one tries again.
func (l *lag) loop(ctx context.Context) {
	t := time.NewTicker(l.opts.LagInterval)
	defer t.Stop()
	for {
		if err := l.refresh(ctx); err != nil && ctx.Err() == nil {
			l.log.Warn().Err(err).Msg("refresh consumer lag")
		}
		if err := l.refreshSlots(ctx); err != nil && ctx.Err() == nil {
			l.log.Warn().Err(err).Msg("refresh the slots waiting per pool")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// consumerGauges are the values of one consumer's gauges.
type consumerGauges struct {
	pending, ackPending, redelivered, lastActive float64
}

// refresh lists the consumers of every lag stream — one paged
// $JS.API.CONSUMER.LIST request per stream, which answers every consumer's
// info — and, for each pool consumer with attempts no worker took, reads
// the first of them (one $JS.API.STREAM.MSG.GET) for the age of the oldest.
// Each series is replaced as a whole: a consumer that went takes its
// series with it. A stream that fails keeps its previous series.
func (l *lag) refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, max(l.opts.LagInterval, 5*time.Second))
	defer cancel()
	consumers := map[string]consumerGauges{}
	waiting := map[string]float64{}
	oldest := map[string]float64{}
	var errs []error
	poolsRead := false
	for _, name := range LagStreams(l.top) {
		infos, stream, err := l.list(ctx, name)
		if err != nil {
			errs = append(errs, err)
			// Keep what the stream had: a failed call is not an empty stream.
			for k := range l.consumerSeries {
				if strings.HasPrefix(k, name+labelSep) {
					consumers[k] = consumerGauges{pending: -1}
				}
			}
			continue
		}
		poolsRead = poolsRead || name == l.top.DispatchStream()
		for _, ci := range infos {
			consumers[name+labelSep+ci.Name] = consumerGauges{
				pending:     float64(ci.NumPending),
				ackPending:  float64(ci.NumAckPending),
				redelivered: float64(ci.NumRedelivered),
				lastActive:  lastActive(ci).Seconds(),
			}
			pool, prio := ci.Config.Metadata[metaPool], ci.Config.Metadata[metaPriority]
			if pool == "" || prio == "" || name != l.top.DispatchStream() {
				continue
			}
			key := pool + labelSep + prio
			waiting[key] += float64(ci.NumPending)
			age := 0.0
			if ci.NumPending > 0 || ci.NumAckPending > 0 {
				if age, err = l.oldestWaiting(ctx, stream, ci); err != nil {
					errs = append(errs, err)
				}
			}
			oldest[key] = max(oldest[key], age)
		}
	}
	l.setConsumers(consumers)
	if poolsRead {
		setGauges(l.metrics.poolOldest, l.poolSeries, oldest)
		l.poolSeries = setGauges(l.metrics.poolWaiting, l.poolSeries, waiting)
	}
	return errors.Join(errs...)
}

// setConsumers sets the consumer gauges to values; an entry with pending
// -1 keeps its series as they are.
func (l *lag) setConsumers(values map[string]consumerGauges) {
	next := make(map[string]bool, len(values))
	m := l.metrics
	for k, v := range values {
		next[k] = true
		if v.pending < 0 {
			continue
		}
		labels := strings.Split(k, labelSep)
		m.consumerPending.WithLabelValues(labels...).Set(v.pending)
		m.consumerAckPending.WithLabelValues(labels...).Set(v.ackPending)
		m.consumerRedelivered.WithLabelValues(labels...).Set(v.redelivered)
		m.consumerLastActive.WithLabelValues(labels...).Set(v.lastActive)
	}
	for k := range l.consumerSeries {
		if !next[k] {
			labels := strings.Split(k, labelSep)
			for _, g := range m.consumerGauges() {
				g.DeleteLabelValues(labels...)
			}
		}
	}
	l.consumerSeries = next
}

// list returns the durable consumers of stream name, and the stream.
func (l *lag) list(ctx context.Context, name string) ([]*jetstream.ConsumerInfo, jetstream.Stream, error) {
	stream, ok := l.streams[name]
	if !ok {
		// One stream info per stream and term, for a handle of it.
		s, err := l.js.Stream(ctx, name)
		if err != nil {
			return nil, nil, fmt.Errorf("consumer lag: stream %s: %w", name, err)
		}
		l.streams[name] = s
		stream = s
	}
	var out []*jetstream.ConsumerInfo
	lister := stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		// Ephemeral consumers (ordered readers, watchers) have random
		// names: they would make a series each.
		if ci.Config.Durable != "" {
			out = append(out, ci)
		}
	}
	if err := lister.Err(); err != nil {
		return nil, nil, fmt.Errorf("consumer lag: list the consumers of %s: %w", name, err)
	}
	return out, stream, nil
}

// oldestWaiting returns how long the oldest attempt on the consumer's
// queue that no worker took has been in the stream, by the server's
// clock: one not yet delivered, or delivered and neither acknowledged
// nor started (held for a slot, or given back for later). AX_DISPATCH is
// a work queue, which keeps no acknowledged message: it is the first
// message on the consumer's filter subject after its ack floor.
func (l *lag) oldestWaiting(ctx context.Context, stream jetstream.Stream, ci *jetstream.ConsumerInfo) (float64, error) {
	subjects := ci.Config.FilterSubjects
	if ci.Config.FilterSubject != "" {
		subjects = []string{ci.Config.FilterSubject}
	}
	age := 0.0
	for _, subj := range subjects {
		msg, err := stream.GetMsg(ctx, ci.AckFloor.Stream+1, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			// Taken since the consumer's info was read.
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("consumer lag: oldest message of %s on %s: %w", ci.Name, ci.Stream, err)
		}
		age = max(age, ci.TimeStamp.Sub(msg.Time).Seconds())
	}
	return age, nil
}

// lastActive returns how long ago, by the server's clock, the consumer
// last delivered a message or had one acknowledged; since it was created,
// when neither ever happened.
func lastActive(ci *jetstream.ConsumerInfo) time.Duration {
	last := ci.Created
	for _, t := range []*time.Time{ci.Delivered.Last, ci.AckFloor.Last} {
		if t != nil && t.After(last) {
			last = *t
		}
	}
	return max(ci.TimeStamp.Sub(last), 0)
}
