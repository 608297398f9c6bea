package monitor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/internal/wait"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// MonitorConsumer is the durable consumer on AX_AUDIT from which the
// auditor that leads monitoring computes the fleet metrics and evaluates
// the alert rules fed by transitions. It starts at the records published
// after it was first created; from then on a record is consumed once
// across leader changes, and records published while no auditor monitors
// wait in it.
const MonitorConsumer = "monitor"

// monitorConsumer is the configuration of [MonitorConsumer].
func (s *Service) monitorConsumer() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       MonitorConsumer,
		Description:   "AX auditor: fleet metrics and alert rules from the audit trail",
		FilterSubject: s.top.Audit(">"),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       2 * time.Minute,
		MaxAckPending: 4 * s.opts.BatchSize,
		DeliverPolicy: jetstream.DeliverNewPolicy,
	}
}

// monitorLoop leads monitoring whenever no other auditor does, until ctx
// ends: like the relay, one auditor at a time holds a PostgreSQL advisory
// lock (its own, so the two duties may lead on different auditors) and
// the others try again every RetryInterval.
func (s *Service) monitorLoop(ctx context.Context, js jetstream.JetStream) {
	for {
		err := s.monitorCampaign(ctx, js)
		if ctx.Err() != nil {
			return
		}
		if err != nil && !errors.Is(err, store.ErrMonitorHeld) {
			s.log.Warn().Err(err).Dur("retry_in", s.opts.RetryInterval).Msg("monitor stopped")
		}
		if !wait.SleepJitter(ctx, s.opts.RetryInterval) {
			return
		}
	}
}

// monitorCampaign takes the monitoring lock, when no one holds it, and
// monitors until ctx ends or something fails.
func (s *Service) monitorCampaign(ctx context.Context, js jetstream.JetStream) error {
	lock, err := s.opts.Store.AcquireMonitor(ctx)
	if err != nil {
		return err
	}
	s.metrics.monitorLeader.Set(1)
	s.log.Info().Msg("monitor leading")
	defer func() {
		s.monitoring.Store(false)
		s.metrics.monitorLeader.Set(0)
		s.metrics.resetFleet()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := lock.Close(cctx); err != nil {
			s.log.Warn().Err(err).Msg("release monitor lock")
		}
	}()
	m := &monitor{Service: s, lock: lock, fleet: newFleet(s.log)}
	return m.run(ctx, js)
}

// monitor is one term as monitoring leader. Its state is used by the
// goroutine of run only.
type monitor struct {
	*Service
	lock  *store.MonitorLock
	fleet *fleet
	// workerTTL is how long a worker stays listed without a heartbeat:
	// how long a pool must be without one before no_live_executor holds.
	workerTTL time.Duration
	// tasks are the tasks as of the last refresh.
	tasks []store.TaskRecord
	// open holds the keys of the open alerts (firing or acked) by rule, as
	// of the last refresh and this term's raises and resolves since; nil
	// until the first refresh. See [monitor.mayChange].
	open map[string]map[string]bool
	// the series each gauge has, to delete those that go.
	instanceSeries, backlogSeries, alertSeries, poolAttemptSeries, poolSlotSeries map[string]bool
}

// run consumes the audit trail and watches ax-workers, and refreshes the
// gauges and evaluates the state rules every RefreshInterval, until ctx
// ends (nil) or the lock's session is lost (an error).
func (m *monitor) run(ctx context.Context, js jetstream.JetStream) error {
	cons, err := js.CreateOrUpdateConsumer(ctx, m.top.AuditStream(), m.monitorConsumer())
	if err != nil {
		return fmt.Errorf("monitor: consumer on %s: %w", m.top.AuditStream(), err)
	}
	kv, err := js.KeyValue(ctx, m.top.WorkersBucket())
	if err != nil {
		return fmt.Errorf("monitor: bucket %s: %w", m.top.WorkersBucket(), err)
	}
	status, err := kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("monitor: bucket %s: %w", m.top.WorkersBucket(), err)
	}
	m.workerTTL = status.TTL()
	watch, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("monitor: watch %s: %w", m.top.WorkersBucket(), err)
	}
	defer func() { _ = watch.Stop() }()

	batches := make(chan []jetstream.Msg)
	consumeCtx, stopConsume := context.WithCancel(ctx)
	consumed := make(chan error, 1)
	go func() { consumed <- m.consume(consumeCtx, cons, batches) }()
	defer func() {
		stopConsume()
		<-consumed
	}()

	lagCtx, stopLag := context.WithCancel(ctx)
	lagDone := make(chan struct{})
	go func() {
		defer close(lagDone)
		(&lag{Service: m.Service, js: js, streams: map[string]jetstream.Stream{}}).loop(lagCtx)
	}()
	defer func() {
		stopLag()
		<-lagDone
	}()

	ticker := time.NewTicker(m.opts.RefreshInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-consumed:
			consumed <- err // for the deferred wait
			return err
		case msgs := <-batches:
			m.handleRecords(ctx, msgs)
		case e, ok := <-watch.Updates():
			if !ok {
				return fmt.Errorf("monitor: watch %s: watcher closed", m.top.WorkersBucket())
			}
			ready := m.fleet.ready
			m.fleet.apply(e, m.metrics)
			if !ready && m.fleet.ready {
				m.refresh(ctx)
				m.monitoring.Store(true)
			}
		case <-ticker.C:
			if err := m.lock.Check(ctx); err != nil {
				return err
			}
			if m.fleet.ready {
				m.refresh(ctx)
			}
		}
	}
}

// auditRecordBytes is about the size of a plain audit record of a
// transition.
const auditRecordBytes = 250

// consume hands batches of up to BatchSize audit messages to batches until
// ctx ends: it waits for a first message, then takes whatever else is
// already there. Messages not handed over are left un-acked for redelivery.
func (m *monitor) consume(ctx context.Context, cons jetstream.Consumer, batches chan<- []jetstream.Msg) error {
	in := make(chan jetstream.Msg, 2*m.opts.BatchSize)
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		select {
		case in <- msg:
		case <-ctx.Done():
			_ = msg.Nak()
		}
	}, jetstream.PullMaxMessages(2*m.opts.BatchSize))
	if err != nil {
		return fmt.Errorf("monitor: consume %s: %w", MonitorConsumer, err)
	}
	// Messages taken but not handled go back at once, for the next leader.
	defer func() {
		cc.Stop()
		<-cc.Closed()
		for {
			select {
			case msg := <-in:
				_ = msg.Nak()
			default:
				return
			}
		}
	}()
	// A message of version 2 carries up to a relay page of records: a
	// batch also ends at about BatchSize records' worth of bytes, so that
	// a backlog of them is not handled 500 pages at a time.
	maxBytes := m.opts.BatchSize * auditRecordBytes
	for {
		var batch []jetstream.Msg
		size := 0
		select {
		case <-ctx.Done():
			return nil
		case msg := <-in:
			batch, size = append(batch, msg), len(msg.Data())
		}
	fill:
		for len(batch) < m.opts.BatchSize && size < maxBytes {
			select {
			case msg := <-in:
				batch, size = append(batch, msg), size+len(msg.Data())
			default:
				break fill
			}
		}
		select {
		case batches <- batch:
		case <-ctx.Done():
			for _, msg := range batch {
				_ = msg.Nak()
			}
			return nil
		}
	}
}

// handleRecords counts the records of a batch of audit messages (either
// version of the audit protocol: a record, or a task's records) and
// evaluates the rules they feed, all together, then acknowledges the
// messages. When PostgreSQL fails the batch is left for redelivery, after
// a delay.
func (m *monitor) handleRecords(ctx context.Context, msgs []jetstream.Msg) {
	var decoded [][]schemas.AuditRecord
	n := 0
	keep := msgs[:0:0]
	for _, msg := range msgs {
		rs, err := schemas.DecodeAuditMessage(msg.Data())
		if err != nil {
			m.log.Warn().Err(err).Str("subject", msg.Subject()).Msg("undecodable audit message skipped")
			_ = msg.Term()
			continue
		}
		decoded, n = append(decoded, rs), n+len(rs)
		keep = append(keep, msg)
	}
	// A message of version 2 holds a page of a task's records, a few
	// hundred bytes each: one message's list is taken as it is, several
	// are joined into a list made once.
	var recs []schemas.AuditRecord
	if len(decoded) == 1 {
		recs = decoded[0]
	} else {
		recs = make([]schemas.AuditRecord, 0, n)
		for _, rs := range decoded {
			recs = append(recs, rs...)
		}
	}
	err := m.applyRecords(ctx, recs)
	for _, msg := range keep {
		if err != nil {
			_ = msg.NakWithDelay(m.opts.RetryInterval)
		} else {
			_ = msg.Ack()
		}
	}
	if err != nil {
		m.log.Error().Err(err).Int("records", len(recs)).Msg("audit records not monitored; they come again")
	}
}

// applyRecords evaluates the alert rules fed by recs, then counts them.
func (m *monitor) applyRecords(ctx context.Context, recs []schemas.AuditRecord) error {
	times, lacking := recordTimes(recs)
	if len(lacking) > 0 {
		read, err := m.opts.Store.InstanceTimes(ctx, lacking)
		if err != nil {
			return err
		}
		for _, id := range lacking {
			if it, ok := read[id]; ok {
				times[id] = it
			} else {
				delete(times, id) // moved to the history: untimed, as before
			}
		}
	}
	if err := m.evaluateRecords(ctx, recs); err != nil {
		return err
	}
	m.metrics.observe(recs, times)
	m.metrics.recordsSeen.Add(float64(len(recs)))
	return nil
}

// refresh sets the gauges read from PostgreSQL and evaluates the state
// rules. Failures are logged: the next refresh tries again.
func (m *monitor) refresh(ctx context.Context) {
	now := m.now()
	if err := m.refreshGauges(ctx, now); err != nil {
		m.log.Error().Err(err).Msg("refresh metrics")
	}
	if err := m.evaluateStates(ctx, now); err != nil {
		m.log.Error().Err(err).Msg("evaluate alert rules")
	}
}

// refreshGauges sets the instance and backlog gauges, and the pools that
// tasks dispatch to.
func (m *monitor) refreshGauges(ctx context.Context, now time.Time) error {
	counts, err := m.opts.Store.LiveInstanceCounts(ctx)
	if err != nil {
		return err
	}
	values := make(map[string]float64, len(counts))
	for _, c := range counts {
		values[c.Task+labelSep+string(c.State)] = float64(c.Count)
	}
	m.instanceSeries = setGauges(m.metrics.instances, m.instanceSeries, values)

	backlog, err := m.opts.Store.Backlog(ctx, BacklogAge, now)
	if err != nil {
		return err
	}
	values = make(map[string]float64, len(backlog))
	for _, b := range backlog {
		values[b.Task+labelSep+string(b.State)] += float64(b.Count)
	}
	m.backlogSeries = setGauges(m.metrics.backlog, m.backlogSeries, values)

	tasks, err := m.opts.Store.ListTasks(ctx)
	if err != nil {
		return err
	}
	m.tasks = tasks
	var pools []string
	seen := map[string]bool{}
	for _, t := range tasks {
		for _, p := range t.Definition.Dispatch.Pools() {
			if t.Enabled && !seen[p] {
				seen[p] = true
				pools = append(pools, p)
			}
		}
	}
	m.fleet.setTaskPools(pools, now, m.metrics)
	return m.refreshPoolAttempts(ctx, pools)
}
