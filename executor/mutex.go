package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// maxKeyLen bounds a mutex or once key: it becomes part of a NATS subject.
const maxKeyLen = 1024

var keyRE = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

// checkKey says what is wrong with key as a KV key, or returns nil.
func checkKey(key string) error {
	switch {
	case key == "":
		return errors.New("is empty")
	case len(key) > maxKeyLen:
		return fmt.Errorf("is %d bytes long; use at most %d", len(key), maxKeyLen)
	case !keyRE.MatchString(key) || key[0] == '.' || key[len(key)-1] == '.' || strings.Contains(key, ".."):
		return errors.New("is not a KV key: use letters, digits, '-', '_', '=', '/' and '.' (not first, last or twice in a row)")
	}
	return nil
}

// mutexLocks takes and releases the tasks' mutex keys (concurrency.
// mutex_key) in the ax-mutex bucket. Its inputs are the bucket, the
// worker's id and clock; it knows nothing of slots or leases.
type mutexLocks struct {
	workerID  string
	bucket    string // the bucket's name
	now       func() time.Time
	templates sync.Map // parsed mutex key templates by their text

	// Set by Run before any goroutine starts.
	js jetstream.JetStream
	kv jetstream.KeyValue
}

// newMutexLocks returns the mutex keys of a worker with options o.
func newMutexLocks(o Options) *mutexLocks {
	return &mutexLocks{workerID: o.WorkerID, bucket: o.Topology.MutexBucket(), now: o.NowFunc}
}

// render renders a task's mutex_key template over a payload. The
// error says which template failed and why, naming the missing field when
// the payload lacks one.
func (m *mutexLocks) render(text string, payload json.RawMessage) (string, error) {
	var t *template.Template
	if v, ok := m.templates.Load(text); ok {
		t = v.(*template.Template)
	} else {
		var err error
		if t, err = schemas.ParseMutexKey(text); err != nil {
			return "", fmt.Errorf("mutex key template %q does not parse: %w", text, err)
		}
		m.templates.Store(text, t)
	}
	var data any
	if len(bytes.TrimSpace(payload)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(payload))
		dec.UseNumber() // numbers render as they were written: 42, not 4.2e+01
		if err := dec.Decode(&data); err != nil {
			return "", fmt.Errorf("mutex key template %q: decode the payload: %w", text, err)
		}
	}
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("mutex key template %q: render over the payload: %w", text, err)
	}
	key := b.String()
	if err := checkKey(key); err != nil {
		return "", fmt.Errorf("mutex key template %q rendered %q, which %w", text, key, err)
	}
	return key, nil
}

// mutexTTL is the TTL of a mutex key taken for an attempt with this
// timeout: twice the timeout, and at least the timeout plus the time a
// worker waits for a handler that ignores its context's end, so that the
// key outlives every run of the attempt even if the worker is cut off
// from NATS and cannot release it. No timeout counts as the default one.
func mutexTTL(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		timeout = schemas.DefaultTimeout
	}
	return max(2*timeout, timeout+abandonAfter+opTimeout)
}

// lock takes mutex key for attempt d if no one holds it: a create that
// expects the key absent (or a marker of its release or expiry), with a
// per-key TTL of [mutexTTL]. It returns the key's revision, the holder's,
// or 0, with no error, when another attempt holds the key.
func (m *mutexLocks) lock(key string, d *schemas.Dispatch) (uint64, error) {
	value, err := json.Marshal(schemas.Lease{InstanceID: d.InstanceID, Attempt: d.Attempt,
		WorkerID: m.workerID, AcquiredAt: m.now()})
	if err != nil {
		return 0, fmt.Errorf("encode mutex value: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	rev, err := m.kv.Create(ctx, key, value, jetstream.KeyTTL(mutexTTL(d.Timeout())))
	switch {
	case err == nil:
		return rev, nil
	case errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err):
		// Held; or released and taken again between the create's two tries.
		return 0, nil
	default:
		return 0, fmt.Errorf("create %s in %s: %w", key, m.bucket, err)
	}
}

// unlock releases a mutex key if it is still at revision rev, the
// holder's: a key that expired and was taken by another attempt stays
// theirs. The release leaves a delete marker that expires after
// [streams.MarkerTTL].
func (m *mutexLocks) unlock(key string, rev uint64, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	err := deleteKey(ctx, m.js, m.bucket, key, rev)
	switch {
	case err == nil:
	case isWrongLastSequence(err):
		log.Warn("mutex expired before its release; another attempt may hold it now", "mutex_key", key)
	default:
		log.Warn("release mutex; it expires with its TTL", "error", err, "mutex_key", key)
	}
}

// deleteKey deletes key of bucket if it is still at revision rev: it puts a
// delete marker (what KeyValue.Delete puts) that carries a TTL of
// [streams.MarkerTTL], so that a bucket without a TTL of its own does not
// keep it for ever. Not a purge: a purge is a roll-up, which the mutex and
// once buckets refuse so that no executor can wipe them (see
// streams.Topology.BucketStreamConfigs). A create finds the marker and
// takes the key at once (KeyValue.Create reads the marker's revision).
func deleteKey(ctx context.Context, js jetstream.JetStream, bucket, key string, rev uint64) error {
	m := nats.NewMsg("$KV." + bucket + "." + key)
	m.Header.Set("KV-Operation", "DEL")
	_, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(streams.MarkerTTL))
	return err
}
