package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
)

// Once runs fn unless the work that key names has already succeeded, and
// records its success; ctx must be a handler's context (or derived from
// it), which carries the worker's handle on the ax-once bucket. Use it for
// the step of a handler that must not be repeated when the attempt is
// retried (a charge, an email), with a key that names the business fact
// ("charge-order-42"), not the attempt.
//
// The guarantees, for calls with the same key on any workers of the
// installation:
//
//   - At most one call runs fn at a time. A call that finds fn running
//     elsewhere waits, until that call ends or ctx does.
//   - Once fn has returned nil and Once has recorded it (Once returned nil),
//     later calls skip fn and return nil, for as long as the bucket keeps
//     the record (streams.Config.OnceTTL, 7 days by default).
//   - A call whose fn fails records nothing: Once returns fn's error as it
//     is (so [Permanent] still works) and the next call runs fn again.
//
// The "running" record that excludes other calls lives as long as a lease
// and is renewed while fn runs; if the worker dies, it expires and the
// next call runs fn again, since it cannot know how far fn got. fn's
// context ends, and Once fails, if the record could not be renewed in
// time and expired. So Once makes a repeat of finished work impossible,
// and one of interrupted work unlikely, but fn should still be written so
// that a repeat after a crash does no harm (an idempotency key at the
// payment provider, an upsert).
//
// Once is not re-entrant: fn must not call Once with the same key. Outside
// a worker (a handler called by a unit test) Once fails without calling fn.
// A key is 1 to 1024 letters, digits, '-', '_', '=', '/' and '.'; an
// invalid key fails permanently.
func Once(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	if fn == nil {
		return Permanent(fmt.Errorf("once %q: fn is nil", key))
	}
	sc, ok := ctx.Value(onceKey{}).(onceRunner)
	if !ok {
		return fmt.Errorf("once %q: %w", key, errNoWorker)
	}
	if err := checkKey(key); err != nil {
		return Permanent(fmt.Errorf("once key %q %w", key, err))
	}
	return sc.run(ctx, key, fn)
}

var (
	errNoWorker = errors.New("the context carries no worker: call Once with the context a worker passes to a handler, or one derived from it")
	errOnceLost = errors.New("the record that the work runs expired before the work finished (the worker could not renew it), so another call may run it too; its success is not recorded")
)

type onceKey struct{}

// onceRunner runs the work of [Once] for one key: the worker's
// [onceScope], or executortest's in-memory records.
type onceRunner interface {
	run(ctx context.Context, key string, fn func(context.Context) error) error
}

// onceScope is what Once needs from the worker, for one attempt.
type onceScope struct {
	s        *Service
	dispatch *schemas.Dispatch
	log      *slog.Logger // the handler's
}

// withOnce returns a context carrying sc for [Once].
func withOnce(ctx context.Context, sc onceRunner) context.Context {
	return context.WithValue(ctx, onceKey{}, sc)
}

// The states of a once record.
const (
	onceRunning = "running"
	onceDone    = "done"
)

// onceRecord is the value of a key in the ax-once bucket.
type onceRecord struct {
	State      string    `json:"state"`
	Task       string    `json:"task"`
	InstanceID int64     `json:"instance_id"`
	Attempt    int       `json:"attempt"`
	WorkerID   string    `json:"worker_id"`
	At         time.Time `json:"at"`
}

func (sc *onceScope) record(state string) []byte {
	data, _ := json.Marshal(onceRecord{State: state, Task: sc.dispatch.Task, InstanceID: sc.dispatch.InstanceID,
		Attempt: sc.dispatch.Attempt, WorkerID: sc.s.opts.WorkerID, At: sc.s.opts.NowFunc()})
	return data
}

// runningTTL is how long a running record lives without renewal: a lease's
// TTL, and at least the server's minimum of 1 s.
func (sc *onceScope) runningTTL() time.Duration { return max(sc.s.leases.ttl(), time.Second) }

func (sc *onceScope) run(ctx context.Context, key string, fn func(context.Context) error) error {
	rev, done, err := sc.claim(ctx, key)
	if err != nil {
		return fmt.Errorf("once %q: %w", key, err)
	}
	if done {
		sc.log.Info("work done already; skipping it", "once_key", key)
		return nil
	}
	fnCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	h := &onceHold{sc: sc, key: key, rev: rev, stop: make(chan struct{}), stopped: make(chan struct{})}
	go h.renew(cancel)
	returned := false
	defer func() {
		if !returned && !h.end() {
			// fn panicked: let the next call run the work.
			sc.release(key, h.rev)
		}
	}()
	err = fn(fnCtx)
	returned = true
	lost := h.end()
	switch {
	case err != nil:
		if !lost {
			sc.release(key, h.rev)
		}
		return err
	case lost:
		return fmt.Errorf("once %q: %w", key, errOnceLost)
	}
	opCtx, cancelOp := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancelOp()
	// The done record has no per-key TTL: it lives for the bucket's.
	if _, err := sc.s.onces.Update(opCtx, key, sc.record(onceDone), h.rev); err != nil {
		return fmt.Errorf("once %q: the work succeeded but recording that failed, so a retry runs it again: %w", key, err)
	}
	return nil
}

// claim creates the running record of key, unless the work is done. It
// waits while another call runs the work.
func (sc *onceScope) claim(ctx context.Context, key string) (rev uint64, done bool, err error) {
	kv := sc.s.onces
	for {
		rev, err := kv.Create(ctx, key, sc.record(onceRunning), jetstream.KeyTTL(sc.runningTTL()))
		if err == nil {
			return rev, false, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLastSequence(err) {
			return 0, false, fmt.Errorf("create running record in %s: %w", kv.Bucket(), err)
		}
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue // released or expired meanwhile
		}
		if err != nil {
			return 0, false, fmt.Errorf("read record in %s: %w", kv.Bucket(), err)
		}
		var rec onceRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return 0, false, fmt.Errorf("read record in %s: not an AX once record (%w); delete the key if it is stray", kv.Bucket(), err)
		}
		if rec.State == onceDone {
			return 0, true, nil
		}
		sc.log.Info("work runs elsewhere; waiting for it to end", "once_key", key, "holder_instance_id", rec.InstanceID,
			"holder_attempt", rec.Attempt, "holder_worker_id", rec.WorkerID)
		if err := sc.waitChange(ctx, key, e.Revision()); err != nil {
			return 0, false, fmt.Errorf("wait for the work running under instance %d attempt %d on worker %s: %w",
				rec.InstanceID, rec.Attempt, rec.WorkerID, err)
		}
	}
}

// waitChange waits until key is no longer at revision rev: updated or
// released, which a watcher sees, or perhaps expired: the bucket has no
// limit markers (see streams.Topology.BucketStreamConfigs), so an expiry
// is silent, and after at most a second it returns for the caller to look
// again: a record of a dead holder is taken over at most a second after
// it expired.
func (sc *onceScope) waitChange(ctx context.Context, key string, rev uint64) error {
	w, err := sc.s.onces.Watch(ctx, key)
	if err != nil {
		return fmt.Errorf("watch %s: %w", key, err)
	}
	defer func() { _ = w.Stop() }()
	expiry := time.NewTimer(min(sc.runningTTL(), time.Second))
	defer expiry.Stop()
	seen := false
	for {
		select {
		case <-expiry.C:
			return nil
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
				return fmt.Errorf("watch %s: the watch ended", key)
			case e == nil:
				// The initial values are in: the key moved on before the
				// watch started, unless they held rev.
				if !seen {
					return nil
				}
			case e.Revision() == rev:
				seen = true
			default:
				return nil
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// release deletes the running record of key if it is still at rev, so
// that the next call runs the work; it leaves a marker that expires after
// streams.MarkerTTL.
func (sc *onceScope) release(key string, rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := deleteKey(ctx, sc.s.js, sc.s.opts.Topology.OnceBucket(), key, rev); err != nil {
		sc.log.Warn("release once record; it expires with its TTL", "error", err, "once_key", key)
	}
}

// onceHold renews a running record while its work runs.
type onceHold struct {
	sc      *onceScope
	key     string
	stop    chan struct{}
	stopped chan struct{}
	// Written by renew only; read after end.
	rev  uint64
	lost bool
}

// renew puts the running record again every third of its TTL, expecting
// the revision it last wrote, until end. If the record expired meanwhile,
// it cancels the work's context with errOnceLost.
func (h *onceHold) renew(cancel context.CancelCauseFunc) {
	defer close(h.stopped)
	ttl := h.sc.runningTTL()
	ticker := time.NewTicker(ttl / 3)
	defer ticker.Stop()
	subject := "$KV." + h.sc.s.opts.Topology.OnceBucket() + "." + h.key
	for {
		select {
		case <-h.stop:
			return
		case <-ticker.C:
		}
		ctx, cancelOp := context.WithTimeout(context.Background(), opTimeout)
		ack, err := h.sc.s.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: h.sc.record(onceRunning)},
			jetstream.WithMsgTTL(ttl), jetstream.WithExpectLastSequencePerSubject(h.rev))
		cancelOp()
		switch {
		case err == nil:
			h.rev = ack.Sequence
		case isWrongLastSequence(err):
			h.lost = true
			h.sc.log.Warn("once record expired before its renewal; cancelling the work", "once_key", h.key)
			cancel(errOnceLost)
			return
		default:
			h.sc.log.Warn("renew once record; trying again at the next renewal", "error", err, "once_key", h.key)
		}
	}
}

// end stops the renewals and reports whether the record was lost.
func (h *onceHold) end() bool {
	close(h.stop)
	<-h.stopped
	return h.lost
}
