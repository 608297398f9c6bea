package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// Timings of the worker's own NATS operations.
const (
	// opTimeout bounds one request to the server (a publish acknowledgement,
	// a KV delete) so that a worker never hangs on a lost reply.
	opTimeout = 10 * time.Second
	// abandonAfter is how long a handler may go on after its context ended
	// before the worker reports the attempt without it and frees its slot.
	abandonAfter = 10 * time.Second
)

// Service is one executor worker. Make it with [New] and start it with
// [Service.Run]. Its methods are safe for concurrent use.
type Service struct {
	// A worker is made of parts, each with its own type, state and file: the
	// intake that fetches from the dispatch queues (pull.go), admission
	// (admit.go), the mutex keys (mutex.go), the fence question (fence.go),
	// the lease keeper (lease.go), the attempt runner (attempt.go), the
	// reporter of started and final reports (report.go, started.go,
	// finals.go, spool.go), the log shipper (logship.go) and the worker's
	// entry in ax-workers (heartbeat.go). Service holds
	// what they share — the options and the slots — and runs the pull loop
	// that hands each fetched attempt from one part to the next.

	opts   Options
	log    *slog.Logger
	tracer trace.Tracer

	started atomic.Bool
	ready   chan struct{}
	freed   chan struct{} // signalled when an attempt gives its slot back
	acks    *ackConfirms  // the server's confirmations of the acks; set by Run

	mu            sync.Mutex
	held          int                      // slots taken: attempts running or about to
	handlerStates map[string]*handlerState // by handler name, made on first use

	in      *intake       // fetches from the worker's dispatch queues
	leases  *leaseKeeper  // keeps the running attempts' leases
	mutex   *mutexLocks   // takes and releases the tasks' mutex keys
	fences  *fenceAsker   // asks whether a redelivered attempt may start
	entry   *registration // the worker's record and grant keys in ax-workers
	reports *reporter     // ships the started and final reports to AX_REPORTS
	logs    *logShipper   // ships the handlers' log lines to AX_LOGS

	runners   sync.WaitGroup // one per attempt, until it is reported
	handlers  sync.WaitGroup // one per handler call
	abandoned atomic.Int64   // handlers left running after their context ended

	// Set by Run before any goroutine starts.
	js jetstream.JetStream
	// pub publishes the batches of lease writes and started reports:
	// cheaper than js's PublishMsgAsync.
	pub   *streams.Publisher
	onces jetstream.KeyValue
	// ackWait is the shortest ack wait of the worker's dispatch consumers
	// (nanoseconds), as they are: a message it holds unacked is said to be
	// in progress every third of it (see [Service.inProgressEvery]).
	ackWait atomic.Int64
	// handlersCtx is the parent of every attempt's context: detached from
	// Run's context, so that handlers outlive it by up to ShutdownTimeout.
	handlersCtx  context.Context
	stopHandlers context.CancelCauseFunc
}

// errShuttingDown is the cause of the handlers' contexts when the worker
// stops and ShutdownTimeout has passed: an attempt it ends is handed back
// (a released report), not failed.
var errShuttingDown = errors.New("worker shutting down")

// New validates opts and fills in their defaults. It does no I/O.
func New(opts Options) (*Service, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	log := o.Logger.With("service", "executor", "worker_id", o.WorkerID)
	leases := newLeaseKeeper(o, log)
	s := &Service{
		opts:          o,
		log:           log,
		tracer:        o.tracer(),
		in:            newIntake(o, log),
		leases:        leases,
		fences:        &fenceAsker{conn: o.Conn, topo: o.Topology, workerID: o.WorkerID, ttl: leases.ttl},
		mutex:         newMutexLocks(o),
		reports:       newReporter(o, log),
		logs:          newLogShipper(o.WorkerID, o.Topology, o.LogBuffer, o.LogFlushInterval, log),
		ready:         make(chan struct{}),
		freed:         make(chan struct{}, 1),
		handlerStates: make(map[string]*handlerState),
	}
	s.entry = &registration{o: o, hostname: hostname(), busy: s.Busy, log: log}
	return s, nil
}

// WorkerID returns the worker's id.
func (s *Service) WorkerID() string { return s.opts.WorkerID }

// Slots returns how many attempts the worker runs at once.
func (s *Service) Slots() int { return s.opts.Slots }

// Busy returns how many of the worker's slots are taken: attempts that
// run, and attempts about to (waiting for their handler's rate limit).
func (s *Service) Busy() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// Ready returns a channel that is closed once Run has registered the worker,
// made its consumers and subscribed to its subjects: from then on, work
// dispatched to its pools reaches it.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run runs the worker until ctx ends. It blocks.
//
// Run does not create AX's streams and buckets (the dispatcher owns the
// topology) and returns an error at once if they are missing; a look-up
// that NATS leaves unanswered or answers "unavailable" (a cluster electing
// its leaders, [streams.Transient]) is logged and tried again until ctx
// ends. When ctx ends
// it stops pulling work, lets running handlers finish for up to
// ShutdownTimeout, then cancels them and hands their attempts back (a
// released report, and the lease deleted: the dispatcher starts the next
// attempt elsewhere at once, without spending one of the task's
// max_attempts), removes the worker from ax-workers and returns once every
// goroutine it started has exited. A final report that JetStream refuses
// (a full store, a stream without quorum) is tried until it is stored; at
// shutdown, for up to another ShutdownTimeout, then it is left in the spool
// (Options.SpoolDir) for the next run; a handler that ignores its context's end
// for longer than 10 s is abandoned, logged, and not waited for. It returns
// nil on such a clean stop, and an error if it cannot start or the NATS
// connection closes under it. Run may be called once.
func (s *Service) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("run executor: Run was already called")
	}
	js, err := jetstream.New(s.opts.Conn, jetstream.WithPublishAsyncTimeout(opTimeout))
	if err != nil {
		return fmt.Errorf("run executor: %w", err)
	}
	s.js, s.reports.js, s.mutex.js = js, js, js
	s.fences.back.count.Store(s.opts.Conn.Stats().Reconnects)
	defer js.CleanupPublisher()
	if s.pub, err = streams.NewPublisher(s.opts.Conn, streams.PublisherOptions{Timeout: opTimeout}); err != nil {
		return fmt.Errorf("run executor: %w", err)
	}
	defer s.pub.Close()
	s.leases.pub, s.reports.pub = s.pub, s.pub
	if err := s.setUp(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("run executor: %w", err)
	}
	s.handlersCtx, s.stopHandlers = context.WithCancelCause(context.WithoutCancel(ctx))
	defer s.stopHandlers(errShuttingDown)
	defer s.reports.stop()
	subs, err := s.subscribe()
	defer subs.close()
	if err != nil {
		return fmt.Errorf("run executor: %w", err)
	}
	// A JetStream that refuses writes (a full store, the bucket without a
	// quorum) refuses the worker's entry too: the worker waits for it, as
	// its running peers wait to store their reports, rather than exit.
	err = streams.UntilStarted(ctx, func(err error, wait time.Duration) {
		s.log.Warn("JetStream refuses the worker's entry in the workers bucket; trying again", "error", err, "retry_in", wait)
	}, s.entry.put)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("run executor: %w", err)
	}
	return s.serve(ctx, subs)
}

// serve runs the worker's background work and its pull loop until ctx
// ends, then drains and takes the worker off the list.
func (s *Service) serve(ctx context.Context, subs *subscriptions) error {
	var background sync.WaitGroup
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	background.Go(func() { s.entry.heartbeat(bgCtx) })
	background.Go(func() { s.leases.renewLeases(bgCtx) })
	background.Go(func() { s.reports.reportStarted(bgCtx) })
	background.Go(func() { s.reports.sendFinals(bgCtx) })
	// The final reports a run before this one left in the spool.
	background.Go(func() { s.reports.sendSpooled(bgCtx) })
	// Stopped with the others once every attempt is reported: it then
	// ships what is left.
	background.Go(func() { s.logs.run(bgCtx, s.pub) })

	s.log.Info("worker started", "pools", s.opts.Pools, "slots", s.opts.Slots, "handlers", s.opts.Mux.Names(), "lease_ttl", s.leases.ttl())
	close(s.ready)

	runErr := s.pull(ctx)

	// Stop intake, drain, then take the worker off the list.
	subs.closeDoorbells()
	s.drain()
	unsubscribe(subs.control)
	stopBackground()
	background.Wait()
	s.entry.delete()
	if s.abandoned.Load() == 0 {
		s.handlers.Wait()
	}
	s.log.Info("worker stopped")
	return runErr
}

// subscriptions are the worker's core NATS subscriptions.
type subscriptions struct {
	control   *nats.Subscription   // cancel orders
	acks      *nats.Subscription   // the server's confirmations of acks
	doorbells []*nats.Subscription // its queues' ready messages
}

// subscribe subscribes to the worker's control subject, the replies to
// its acks and its queues' doorbells. The subscriptions it returns, even
// with an error, are to be closed.
func (s *Service) subscribe() (*subscriptions, error) {
	nc, subs := s.opts.Conn, &subscriptions{}
	var err error
	if subs.control, err = nc.Subscribe(s.opts.Topology.Control(s.opts.WorkerID), s.onControl); err != nil {
		return subs, fmt.Errorf("subscribe to %s: %w", s.opts.Topology.Control(s.opts.WorkerID), err)
	}
	if s.acks, err = subscribeAcks(nc); err != nil {
		return subs, err
	}
	subs.acks = s.acks.sub
	rings := map[string]nats.MsgHandler{s.opts.Topology.ReadyWorker(s.opts.WorkerID): func(*nats.Msg) { s.in.onOwnReady() }}
	for _, pool := range s.opts.Pools {
		rings[s.opts.Topology.ReadyPool(pool)] = func(m *nats.Msg) { s.in.onReady(pool, m.Subject) }
	}
	for subject, ring := range rings {
		sub, err := nc.Subscribe(subject, ring)
		if err != nil {
			return subs, fmt.Errorf("subscribe to %s: %w", subject, err)
		}
		subs.doorbells = append(subs.doorbells, sub)
	}
	return subs, nil
}

// closeDoorbells ends the doorbell subscriptions: the worker takes no
// more work.
func (subs *subscriptions) closeDoorbells() {
	for _, sub := range subs.doorbells {
		unsubscribe(sub)
	}
	subs.doorbells = nil
}

// close ends every subscription; some may have ended already.
func (subs *subscriptions) close() {
	subs.closeDoorbells()
	for _, sub := range []*nats.Subscription{subs.control, subs.acks} {
		if sub != nil {
			unsubscribe(sub)
		}
	}
}

// setUp looks up the topology — trying again, logged, while NATS leaves
// the look-ups unanswered or answers "unavailable" ([streams.Transient]), as
// a cluster electing its leaders does — and makes the worker's consumers.
// A consumer it cannot make stops the start: the likely cause is a
// credential that does not name it, which waiting does not cure.
func (s *Service) setUp(ctx context.Context) error {
	err := streams.UntilStarted(ctx, func(err error, wait time.Duration) {
		s.log.Warn("executor start-up failed; trying again", "error", err, "retry_in", wait)
	}, s.lookUp)
	if err != nil {
		return err
	}
	return s.makeConsumers(ctx)
}

// lookUp looks up the streams and buckets the worker uses and checks their
// settings.
func (s *Service) lookUp(ctx context.Context) error {
	topo := s.opts.Topology
	const hint = "AX's streams and buckets are made by the dispatcher: start `ax dispatcher` or `ax dev` first"
	for _, name := range []string{topo.DispatchStream(), topo.ReportsStream(), topo.LogsStream()} {
		if _, err := s.js.Stream(ctx, name); err != nil {
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("look up stream %s: %w; %s", name, err, hint)
			}
			return fmt.Errorf("look up stream %s: %w", name, err)
		}
	}
	bucket := func(name string) (jetstream.KeyValue, error) {
		kv, err := s.js.KeyValue(ctx, name)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("look up bucket %s: %w; %s", name, err, hint)
		}
		if err != nil {
			return nil, fmt.Errorf("look up bucket %s: %w", name, err)
		}
		return kv, nil
	}
	var err error
	if s.leases.kv, err = bucket(topo.LeasesBucket()); err != nil {
		return err
	}
	if s.entry.kv, err = bucket(topo.WorkersBucket()); err != nil {
		return err
	}
	if s.mutex.kv, err = bucket(topo.MutexBucket()); err != nil {
		return err
	}
	if s.onces, err = bucket(topo.OnceBucket()); err != nil {
		return err
	}
	if err := s.checkBuckets(ctx, hint); err != nil {
		return err
	}
	if s.in.dispatch, err = s.js.Stream(ctx, topo.DispatchStream()); err != nil {
		return fmt.Errorf("look up stream %s: %w", topo.DispatchStream(), err)
	}
	return nil
}

// checkBuckets checks the settings the worker relies on of the buckets
// it looked up: message TTLs where keys carry their own, a lease TTL, and
// a workers' TTL longer than the heartbeat interval. hint says how to
// make the topology.
func (s *Service) checkBuckets(ctx context.Context, hint string) error {
	// Mutex keys, running records and release markers carry a per-key
	// TTL, which a bucket allows only with message TTLs on.
	for _, kv := range []jetstream.KeyValue{s.mutex.kv, s.onces} {
		status, err := kv.Status(ctx)
		if err != nil {
			return fmt.Errorf("read status of bucket %s: %w", kv.Bucket(), err)
		}
		if st, ok := status.(*jetstream.KeyValueBucketStatus); ok && !st.StreamInfo().Config.AllowMsgTTL {
			return fmt.Errorf("bucket %s does not allow message TTLs, so its keys cannot carry one; %s", kv.Bucket(), hint)
		}
	}
	topo := s.opts.Topology
	status, err := s.leases.kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("read status of bucket %s: %w", topo.LeasesBucket(), err)
	}
	if s.leases.ttlNanos.Store(int64(status.TTL())); status.TTL() <= 0 {
		return fmt.Errorf("bucket %s has no TTL, so a lease would never expire; %s", topo.LeasesBucket(), hint)
	}
	status, err = s.entry.kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("read status of bucket %s: %w", topo.WorkersBucket(), err)
	}
	if ttl := status.TTL(); ttl > 0 && s.opts.HeartbeatInterval >= ttl {
		return fmt.Errorf("heartbeat interval %s is not shorter than the TTL %s of bucket %s: the worker would drop off the list between heartbeats; use a shorter HeartbeatInterval",
			s.opts.HeartbeatInterval, ttl, topo.WorkersBucket())
	}
	return nil
}

// makeConsumers makes the worker's consumers, once the topology is looked up.
func (s *Service) makeConsumers(ctx context.Context) error {
	topo := s.opts.Topology
	var err error
	// The worker's own subject comes first: the dispatcher routed that
	// work to this worker alone, so no other can take it.
	in := s.in
	in.own = &queue{pool: streams.WorkerPool, subject: topo.DispatchWorker(s.opts.WorkerID)}
	ackWait := streams.DispatchAckWait(s.leases.ttl())
	own := topo.WorkerConsumer(s.opts.WorkerID)
	own.AckWait = ackWait
	if in.own.consumer, err = s.consumer(ctx, own, "its worker id "+s.opts.WorkerID); err != nil {
		return err
	}
	// A queue per pool, priority and handler: the worker pulls only the
	// work of the handlers it registered, and no more of a handler's than
	// its Concurrency leaves room for (see fetch), from the first round.
	s.mu.Lock()
	for _, name := range s.opts.Mux.Names() {
		if e, ok := s.opts.Mux.entry(name); ok {
			s.handlerState(name, e.limits)
		}
	}
	s.mu.Unlock()
	in.byRing = make(map[string]*queue)
	for _, q := range pullOrder(s.opts.Pools, schemas.Priorities, s.opts.Mux.Names()) {
		cfg := topo.PoolConsumer(q.pool, q.priority, q.handler)
		cfg.AckWait = ackWait
		if q.consumer, err = s.consumer(ctx, cfg, "pool "+q.pool+" and handler "+q.handler); err != nil {
			return err
		}
		q.subject = cfg.FilterSubject
		in.queues = append(in.queues, q)
		in.byRing[queueKey(q.pool, q.priority, q.handler)] = q
	}
	s.entry.startedAt = s.opts.NowFunc()
	return nil
}

// consumer returns the durable consumer of cfg on AX_DISPATCH, making it
// if it is not there. A consumer that is there keeps its settings, even if
// they differ from cfg's: the worker follows the topology, it does not
// reset it. whose says what the consumer is for ("pool gpu and handler
// x"): a credential that does not name it gets no answer (the server
// drops a request it may not publish), and the error says so.
func (s *Service) consumer(ctx context.Context, cfg jetstream.ConsumerConfig, whose string) (jetstream.Consumer, error) {
	stream := s.opts.Topology.DispatchStream()
	reqCtx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	c, err := s.js.CreateConsumer(reqCtx, stream, cfg)
	if errors.Is(err, jetstream.ErrConsumerExists) {
		c, err = s.js.Consumer(reqCtx, stream, cfg.Durable)
	}
	if err != nil && ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)) {
		return nil, fmt.Errorf("create consumer %s on %s: no answer in %s: if the NATS server logs a permissions violation "+
			"for $JS.API.CONSUMER.CREATE.%s.%s, this worker's NATS credential does not name %s; make the credential for what the "+
			"worker serves (ax user add executor --pool <pool> --worker <worker id> --handler <handler>, one --handler per handler "+
			"it registers: %s), or register only the handlers the credential names: %w",
			cfg.Durable, stream, opTimeout, stream, cfg.Durable, whose, strings.Join(s.opts.Mux.Names(), ", "), err)
	}
	if err != nil {
		return nil, fmt.Errorf("create consumer %s on %s: %w", cfg.Durable, stream, err)
	}
	// A consumer made before keeps its own ack wait: the worker's progress
	// signals follow the shortest it has.
	if w := int64(c.CachedInfo().Config.AckWait); w > 0 {
		for {
			old := s.ackWait.Load()
			if (old != 0 && old <= w) || s.ackWait.CompareAndSwap(old, w) {
				break
			}
		}
	}
	return c, nil
}

// drain waits for the running attempts up to ShutdownTimeout, then cancels
// the rest and waits for them to be reported.
func (s *Service) drain() {
	done := make(chan struct{})
	go func() {
		s.runners.Wait()
		close(done)
	}()
	if n := s.Busy(); n > 0 {
		s.log.Info("waiting for running attempts", "busy", n, "shutdown_timeout", s.opts.ShutdownTimeout)
	}
	timer := time.NewTimer(s.opts.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-timer.C:
	}
	s.log.Warn("shutdown timeout passed; cancelling running attempts and handing them back", "busy", s.Busy())
	s.stopHandlers(errShuttingDown)
	// Their reports (and those that JetStream refuses, as during an
	// outage) get as long again: then the worker stops trying, and a
	// report not stored is left in the spool, if the worker has one.
	timer.Reset(s.opts.ShutdownTimeout)
	select {
	case <-done:
	case <-timer.C:
		s.log.Warn("final reports still refused after the shutdown timeout; stopping their tries (the spool keeps them)", "busy", s.Busy(), "spool", s.opts.SpoolDir != "")
		s.reports.stop()
		<-done
	}
}

// signal wakes whoever waits on ch without ever blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// unsubscribe ends sub, which may already have ended.
func unsubscribe(sub *nats.Subscription) {
	if sub.IsValid() {
		_ = sub.Unsubscribe()
	}
}
