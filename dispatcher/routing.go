package dispatcher

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/url"
	"strconv"
	"sync"
	"text/template"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// rerouteDelay is how long an attempt that no live worker may take waits
// before the dispatcher routes it again.
const rerouteDelay = 2 * time.Second

// route is where one attempt goes: the subject it is published to, the
// doorbell rung for it, its Nats-Msg-Id, and, when it goes to one worker,
// the worker and how the attempt routes (see [routeHeader]) so that its
// message can be routed again without the store if that worker leaves.
type route struct {
	subject, ring, msgID string
	worker, header       string
	// pool is the pool of an instance's set of pools that the worker
	// takes the attempt in ("" for an instance of one pool; see anyPool).
	pool string
	// trace is the traceparent of the attempt's dispatch span, "" for
	// none (see trace.go).
	trace string
}

// routeHeader is the header of a message on a worker's own subject that
// says how its attempt routes: a URL query of strategy, pool, key and
// min_worker_version (see [encodeRoute]).
const routeHeader = "Ax-Route"

func encodeRoute(a store.Attempt) string {
	v := url.Values{}
	v.Set("strategy", string(a.Strategy))
	v.Set("pool", a.Pool)
	if a.Key != "" {
		v.Set("key", a.Key)
	}
	if a.MinWorkerVersion != "" {
		v.Set("min_worker_version", a.MinWorkerVersion)
	}
	return v.Encode()
}

// decodeRoute fills a's route and pool from a routeHeader value.
func decodeRoute(a *store.Attempt, header string) error {
	v, err := url.ParseQuery(header)
	if err != nil {
		return fmt.Errorf("decode %s header %q: %w", routeHeader, header, err)
	}
	a.Strategy = schemas.DispatchStrategy(v.Get("strategy"))
	a.Pool, a.Key, a.MinWorkerVersion = v.Get("pool"), v.Get("key"), v.Get("min_worker_version")
	return nil
}

// addDispatch adds the message that publishes d on route r to batch,
// with its Nats-Msg-Id and, to one worker, its routeHeader. A message of
// more than limit bytes is not added: it returns an [errTooLarge].
func addDispatch(batch *streams.AsyncBatch, r route, d schemas.Dispatch, limit int64) error {
	data, err := schemas.MarshalDispatch(d)
	if err != nil {
		return fmt.Errorf("encode message for %s: %w", r.subject, err)
	}
	if int64(len(data)) > limit {
		return errTooLarge{size: len(data), limit: limit}
	}
	var hdr [3]streams.Header
	n := 0
	if r.msgID != "" {
		hdr[n], n = streams.Header{Key: streams.HeaderMsgID, Value: r.msgID}, n+1
	}
	if r.header != "" {
		hdr[n], n = streams.Header{Key: routeHeader, Value: r.header}, n+1
	}
	if r.trace != "" {
		hdr[n], n = streams.Header{Key: streams.HeaderTraceParent, Value: r.trace}, n+1
	}
	batch.AddData(r.subject, data, hdr[:n]...)
	return nil
}

// errTooLarge says that an attempt's dispatch message exceeds what NATS
// takes: publishing it would fail every time.
type errTooLarge struct {
	size  int
	limit int64
}

func (e errTooLarge) Error() string {
	return fmt.Sprintf("the dispatch message has %d bytes, over the %d the NATS max_payload allows (less the headers); "+
		"the attempt can never reach a worker: send a smaller payload, such as a reference to the data", e.size, e.limit)
}

// errNoWorker says that no live worker may take an attempt now.
type errNoWorker struct {
	pool, handler, minVersion string
	protocol                  int
}

func (e errNoWorker) Error() string {
	msg := fmt.Sprintf("no live worker of pool %q has handler %q", e.pool, e.handler)
	if e.minVersion != "" {
		msg += " at version " + e.minVersion + " or newer"
	}
	if e.protocol > 1 {
		msg += fmt.Sprintf(" and speaks version %d of the executor protocol", e.protocol)
	}
	// A worker that claims them without a grant key counts as none.
	return msg + " (with a grant key of its credential for both)"
}

// router is the part of the dispatcher that decides where an attempt
// goes (see [router.route]): by its route, over the live workers the
// watch of ax-workers keeps (workers), in the executor protocol's version
// protocol; and routes again what waits on the queues of workers that
// left (see [router.reroute]). Safe for concurrent use; each batch brings
// its own [routing].
type router struct {
	top      streams.Topology
	protocol int
	workers  *liveWorkers
	log      zerolog.Logger
	// hashKeys holds the parsed hash_key templates by their text.
	hashKeys sync.Map

	// For the departures (departures.go): the workers that left, whose
	// queues wait to be routed again (gone), read through js (set by Run)
	// and conn in batches of batchSize, their pinned attempts noted in the
	// store.
	gone      *departures
	js        jetstream.JetStream
	conn      *nats.Conn
	store     *store.Store
	batchSize int
	now       func() time.Time
	metrics   *metrics
	next      completer
	// waits records why the attempts routed again wait.
	waits *waitTracker
}

// routing is what one batch's routes share: the attempts it routed to
// each worker, and the subjects of the pools' queues it publishes to,
// built once a batch.
type routing struct {
	load   map[string]int // attempts this batch routed to each worker
	queues map[queueKey]queueSubjects
}

// queueKey names a pool's queue: its pool, priority and handler.
type queueKey struct {
	pool     string
	priority schemas.Priority
	handler  string
}

// queueSubjects are a queue's dispatch subject and its doorbell.
type queueSubjects struct{ subject, ring string }

func newRouting() *routing {
	return &routing{load: make(map[string]int), queues: make(map[queueKey]queueSubjects)}
}

// queue returns the subjects of pool's queue at priority p for handler.
func (rs *routing) queue(top streams.Topology, pool string, p schemas.Priority, handler string) queueSubjects {
	k := queueKey{pool: pool, priority: p, handler: handler}
	q, ok := rs.queues[k]
	if !ok {
		q = queueSubjects{subject: top.Dispatch(pool, p, handler), ring: top.Ready(pool, p, handler)}
		rs.queues[k] = q
	}
	return q
}

// route decides where an attempt goes, by its instance's route:
//
//   - "pull" without min_worker_version, in version 1 of the executor
//     protocol: the pool's subject at the
//     attempt's priority for its handler, where the pool's workers that
//     registered the handler pull it; with none live, it waits there.
//   - "pull" with min_worker_version, or in a later version of the
//     protocol (which a worker of the pool that speaks only version 1
//     must not see): the own subject of the least busy
//     eligible live worker (busy/slots from its heartbeat, plus what this
//     batch routed to it: load), so that no older worker ever sees it.
//   - "worker": the named worker's own subject, live or not: the message
//     waits in the worker's consumer until it comes (back). A live worker
//     that does not serve the pool and the handler (by its heartbeat and
//     its credential's grant keys) or is older than min_worker_version is
//     not given it.
//   - "hash": the own subject of the eligible live worker that wins the
//     rendered hash_key by rendezvous hashing (see [rendezvous]). A key
//     that does not render falls back to "pull" with a warning.
//
// Eligible workers serve the pool, have the handler registered (both
// backed by a grant key of their credential, see [liveWorkers]), run
// min_worker_version or newer and speak the dispatcher's version of the
// executor protocol (Options.Protocol). errNoWorker says none is live.
func (rt *router) route(a store.Attempt, rs *routing) (route, error) {
	// The message id names the worker: an attempt routed again to
	// another worker (its first one left) is a new message, which the
	// duplicate window must not drop.
	to := func(id string) route {
		rs.load[id]++
		return route{subject: rt.top.DispatchWorker(id), ring: rt.top.ReadyWorker(id),
			msgID: dispatchMsgID(a.ID, a.Attempt) + "@" + id, worker: id, header: encodeRoute(a),
			pool: rt.poolTo(id, poolAttempt{a.Pool, a.Handler, a.MinWorkerVersion})}
	}
	protocol := rt.protocol
	noWorker := errNoWorker{pool: a.Pool, handler: a.Handler, minVersion: a.MinWorkerVersion, protocol: protocol}
	switch a.Strategy {
	case schemas.DispatchWorker:
		if w, ok := rt.workers.live(a.Key); ok && (!w.Speaks(protocol) ||
			rt.workers.takes(a.Key, a.Pool, a.Handler, a.MinWorkerVersion) == "") {
			return route{}, noWorker
		}
		return to(a.Key), nil
	case schemas.DispatchHash:
		key, err := rt.renderHashKey(a.Key, a.Payload)
		if err != nil {
			rt.log.Warn().Err(err).Int64("instance_id", a.ID).Str("task", a.Task).
				Msg("hash_key does not render over the payload; the attempt is routed as pull")
			break
		}
		workers := rt.workers.eligible(a.Pool, a.Handler, a.MinWorkerVersion, protocol)
		if len(workers) == 0 {
			return route{}, noWorker
		}
		return to(rendezvous(key, workers)), nil
	}
	if a.MinWorkerVersion == "" && protocol <= 1 && !anyPool(a.Pool) {
		q := rs.queue(rt.top, a.Pool, a.Priority, a.Handler)
		return route{subject: q.subject, ring: q.ring, msgID: dispatchMsgID(a.ID, a.Attempt)}, nil
	}
	workers := rt.workers.eligible(a.Pool, a.Handler, a.MinWorkerVersion, protocol)
	if len(workers) == 0 {
		return route{}, noWorker
	}
	best, bestLoad := "", 0.0
	for _, w := range workers {
		l := float64(w.Busy+rs.load[w.ID]) / float64(max(w.Slots, 1))
		if best == "" || l < bestLoad {
			best, bestLoad = w.ID, l
		}
	}
	return to(best), nil
}

// rendezvous returns the id of the worker that wins key by highest random
// weight: each worker scores hash(key, worker id) and the highest score
// wins. A worker that joins takes only the keys it now wins; one that leaves
// gives up only its own keys, each to the runner-up. workers is not empty.
func rendezvous(key string, workers []schemas.Worker) string {
	best, bestScore := "", uint64(0)
	for _, w := range workers {
		if sc := score(key, w.ID); best == "" || sc > bestScore || (sc == bestScore && w.ID < best) {
			best, bestScore = w.ID, sc
		}
	}
	return best
}

// score hashes a key and a worker id together: FNV-1a, then the
// SplitMix64 finalizer so that close ids score far apart.
func score(key, workerID string) uint64 {
	h := fnv.New64a()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(key)))
	_, _ = h.Write(n[:])
	_, _ = h.Write([]byte(key))
	_, _ = h.Write([]byte(workerID))
	z := h.Sum64() + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// renderHashKey renders a hash_key template over a payload, as the
// executor renders a mutex key: the payload decoded with numbers as written.
func (rt *router) renderHashKey(text string, payload json.RawMessage) (string, error) {
	var tmpl *template.Template
	if t, ok := rt.hashKeys.Load(text); ok {
		tmpl = t.(*template.Template)
	} else {
		t, err := schemas.ParseHashKey(text)
		if err != nil {
			return "", fmt.Errorf("parse hash_key %q: %w", text, err)
		}
		rt.hashKeys.Store(text, t)
		tmpl = t
	}
	var data any
	if len(bytes.TrimSpace(payload)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(payload))
		dec.UseNumber()
		if err := dec.Decode(&data); err != nil {
			return "", fmt.Errorf("decode the payload: %w", err)
		}
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, data); err != nil {
		return "", fmt.Errorf("render hash_key %q: %w", text, err)
	}
	return b.String(), nil
}

// addReroute adds to batch a firing that routes an attempt again after
// rerouteDelay: a retry firing of the attempt it is at, which the store
// finds DISPATCHED and hands back to be published (see
// [store.Store.StartRetries]). Its schedule replaces any earlier one for
// the same attempt.
func (rt *router) addReroute(batch *streams.AsyncBatch, a store.Attempt) error {
	eventID := "route-" + strconv.FormatInt(a.ID, 10) + "-" + strconv.Itoa(a.Attempt)
	ev := schemas.TriggerEvent{
		EventID: eventID,
		Task:    a.Task,
		Source:  schemas.SourceRetry,
		FiredAt: rt.now().Add(rerouteDelay),
		Retry:   &schemas.RetryOf{InstanceID: a.ID, Attempt: a.Attempt},
	}
	msg, err := streams.NewScheduleMsg(rt.top.Sched(eventID), rt.top.AXTrigger(a.Task), "", ev.FiredAt, ev)
	if err != nil {
		return err
	}
	batch.Add(msg)
	return nil
}
