package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Config sizes the topology. Zero fields take the stated defaults.
type Config struct {
	// Replicas of every stream and bucket (default 1; 3 on a cluster).
	Replicas int
	// Storage of every stream (default file).
	Storage jetstream.StorageType
	// DuplicateWindow is how long a Nats-Msg-Id is remembered (default 2m).
	DuplicateWindow time.Duration
	// TriggersMaxAge keeps fired triggers for inspection (default 24h).
	TriggersMaxAge time.Duration
	// LeaseTTL is how long a lease lives without renewal (default 30s).
	LeaseTTL time.Duration
	// WorkerTTL is how long a worker stays listed without a heartbeat (default 30s).
	WorkerTTL time.Duration
	// AuditMaxAge keeps audit records (default 30 days).
	AuditMaxAge time.Duration
	// LogsMaxAge and LogsMaxBytes bound the task logs (defaults 7 days, 1 GiB).
	LogsMaxAge   time.Duration
	LogsMaxBytes int64
	// OnceTTL is how long the ax-once bucket remembers that a business key's
	// work succeeded (executor.Once; default 7 days): a repeat after that
	// runs the work again.
	OnceTTL time.Duration

	// Zero (unset) settings above keep what the installed streams and
	// buckets have, and take the defaults only where nothing is installed
	// (Storage aside: the server cannot change it). Reconfigure lets
	// [Topology.Reconcile] change an installed setting to the value stated
	// here; without it a different value is refused.
	Reconfigure bool
}

// Defaults of [Config].
const (
	DefaultDuplicateWindow = 2 * time.Minute
	DefaultTriggersMaxAge  = 24 * time.Hour
	DefaultLeaseTTL        = 30 * time.Second
	DefaultWorkerTTL       = 30 * time.Second
	DefaultAuditMaxAge     = 30 * 24 * time.Hour
	DefaultLogsMaxAge      = 7 * 24 * time.Hour
	DefaultLogsMaxBytes    = 1 << 30
	DefaultOnceTTL         = 7 * 24 * time.Hour
	// MarkerTTL is how long the mutex and once buckets keep the marker a
	// key leaves when it expires or is released.
	MarkerTTL = time.Minute
)

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	def(&c.DuplicateWindow, DefaultDuplicateWindow)
	def(&c.TriggersMaxAge, DefaultTriggersMaxAge)
	def(&c.LeaseTTL, DefaultLeaseTTL)
	def(&c.WorkerTTL, DefaultWorkerTTL)
	def(&c.AuditMaxAge, DefaultAuditMaxAge)
	def(&c.LogsMaxAge, DefaultLogsMaxAge)
	def(&c.OnceTTL, DefaultOnceTTL)
	if c.LogsMaxBytes == 0 {
		c.LogsMaxBytes = DefaultLogsMaxBytes
	}
	return c
}

// StreamConfigs returns the configuration of every stream of the topology.
func (t Topology) StreamConfigs(c Config) []jetstream.StreamConfig {
	c = c.withDefaults()
	return append(t.firingStreamConfigs(c), t.attemptStreamConfigs(c)...)
}

// firingStreamConfigs are StreamConfigs' streams of firings, in order:
// the outside publishers', then AX's own.
func (t Topology) firingStreamConfigs(c Config) []jetstream.StreamConfig {
	return []jetstream.StreamConfig{{
		// Outside publishers write here: no header may act beyond the
		// message that carries it, so no schedules and no rollups (the
		// server would switch rollups on for schedules). Its first: an
		// install of an earlier AX is migrated before AX_FIRINGS takes
		// its ax.sched subjects (see [Topology.Ensure]).
		Name:        t.TriggersStream(),
		Description: "AX firings of outside publishers (" + t.prefix + ".trigger.<task>)",
		Subjects:    []string{t.subject("trigger", ">")},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      c.TriggersMaxAge,
		Duplicates:  c.DuplicateWindow,
		Storage:     c.Storage,
		Replicas:    c.Replicas,
	}, {
		// Only AX's services write here: the message schedules of
		// delayed firings and retries, whose targets must be subjects
		// of the same stream (nats-server 2.15.3 refuses others).
		Name:              t.FiringsStream(),
		Description:       "AX firings of AX's own services (" + t.prefix + ".fire.<task>.api|ax) and one-shot schedules of later firings",
		Subjects:          []string{t.subject("fire", ">"), t.subject("sched", ">")},
		Retention:         jetstream.LimitsPolicy,
		MaxAge:            c.TriggersMaxAge,
		Duplicates:        c.DuplicateWindow,
		AllowMsgSchedules: true,
		Storage:           c.Storage,
		Replicas:          c.Replicas,
	}}
}

// attemptStreamConfigs are StreamConfigs' streams of attempts and what
// they leave, in order: dispatch, reports, audit, logs.
func (t Topology) attemptStreamConfigs(c Config) []jetstream.StreamConfig {
	return []jetstream.StreamConfig{{
		Name:        t.DispatchStream(),
		Description: "AX attempts routed to executor pools",
		Subjects:    []string{t.subject("dispatch", ">"), t.Keeper(t.DispatchStream())},
		Retention:   jetstream.WorkQueuePolicy,
		Duplicates:  c.DuplicateWindow,
		Storage:     c.Storage,
		Replicas:    c.Replicas,
	}, {
		Name:        t.ReportsStream(),
		Description: "AX executors' reports on attempts",
		Subjects:    []string{t.subject("report", ">"), t.Keeper(t.ReportsStream())},
		Retention:   jetstream.WorkQueuePolicy,
		Duplicates:  c.DuplicateWindow,
		Storage:     c.Storage,
		Replicas:    c.Replicas,
	}, {
		Name:        t.AuditStream(),
		Description: "AX audit trail: every instance transition and operator action",
		Subjects:    []string{t.subject("audit", ">")},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      c.AuditMaxAge,
		Duplicates:  c.DuplicateWindow,
		Storage:     c.Storage,
		Replicas:    c.Replicas,
	}, {
		Name:        t.LogsStream(),
		Description: "AX task logs, one subject per instance",
		Subjects:    []string{t.subject("log", ">")},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      c.LogsMaxAge,
		MaxBytes:    c.LogsMaxBytes,
		Discard:     jetstream.DiscardOld,
		Storage:     c.Storage,
		Replicas:    c.Replicas,
	}}
}

// BucketConfigs returns the configuration of every KV bucket of the topology.
func (t Topology) BucketConfigs(c Config) []jetstream.KeyValueConfig {
	c = c.withDefaults()
	return []jetstream.KeyValueConfig{{
		// The limit markers make a worker that stopped heartbeating an
		// event (a purge marker), told apart from a clean stop (a delete):
		// the auditor counts heartbeat losses from them.
		Bucket:         t.WorkersBucket(),
		Description:    "AX live executors, one key per worker, put on every heartbeat",
		TTL:            c.WorkerTTL,
		LimitMarkerTTL: MarkerTTL,
		Storage:        c.Storage,
		Replicas:       c.Replicas,
	}, {
		// Every renewal is a new revision, so the bucket TTL restarts a
		// lease's age; the limit markers make an expiry an event the
		// dispatcher's reaper watches.
		Bucket:         t.LeasesBucket(),
		Description:    "AX attempt leases, key <instance_id>.<attempt>",
		TTL:            c.LeaseTTL,
		LimitMarkerTTL: max(c.LeaseTTL, time.Hour),
		Storage:        c.Storage,
		Replicas:       c.Replicas,
	}, {
		// No bucket TTL: each key carries its own (twice its attempt's
		// timeout), and so does the marker of its release (MarkerTTL).
		// No limit markers: nats-server turns roll-ups on with them, and
		// every executor writes this bucket (see BucketStreamConfigs).
		Bucket:      t.MutexBucket(),
		Description: "AX task mutexes held by executors, key <rendered concurrency.mutex_key>",
		Storage:     c.Storage,
		Replicas:    c.Replicas,
	}, {
		// Completion records live for the bucket TTL; the short-lived
		// "running" records carry a per-key TTL, and so does the marker
		// of their release. No limit markers, as for the mutexes.
		Bucket:      t.OnceBucket(),
		Description: "AX executor.Once records, key <business key>: running (short per-key TTL) or done",
		TTL:         c.OnceTTL,
		Storage:     c.Storage,
		Replicas:    c.Replicas,
	}, {
		// A change signal, not a copy of the store: the api puts a task's
		// schemas.TaskEntry after every change, and the trigger service
		// watches the bucket and reloads the task from PostgreSQL.
		Bucket:      t.TasksBucket(),
		Description: "AX task versions, key <task>, put by the api after every change of a task",
		Storage:     c.Storage,
		Replicas:    c.Replicas,
	}}
}

// BucketStreamConfigs returns the configuration of the stream behind every
// KV bucket of [Topology.BucketConfigs], as nats.go's CreateKeyValue makes
// it but for two settings:
//
//   - roll-ups (the Nats-Rollup header, which purges a subject or the
//     whole stream) are off wherever nats-server allows it, that is on
//     every bucket without limit markers: the mutex and once buckets,
//     which every executor writes, and the tasks bucket. With limit markers
//     (ax-workers, ax-leases) nats-server 2.15 turns them on whatever the
//     configuration says; see docs/security.md.
//   - the mutex and once buckets allow per-message TTLs (Nats-TTL) without
//     limit markers: their keys and release markers carry a TTL.
func (t Topology) BucketStreamConfigs(c Config) []jetstream.StreamConfig {
	c = c.withDefaults()
	perKeyTTL := map[string]bool{t.MutexBucket(): true, t.OnceBucket(): true}
	var out []jetstream.StreamConfig
	for _, kc := range t.BucketConfigs(c) {
		// nats.go's prepareKeyValueConfig, field by field, so that a
		// bucket made by CreateKeyValue before reads as the same.
		dup := 2 * time.Minute
		if kc.TTL > 0 && kc.TTL < dup {
			dup = kc.TTL
		}
		markers := kc.LimitMarkerTTL > 0
		out = append(out, jetstream.StreamConfig{
			Name:                   "KV_" + kc.Bucket,
			Description:            kc.Description,
			Subjects:               []string{"$KV." + kc.Bucket + ".>"},
			MaxMsgsPerSubject:      1,
			MaxBytes:               -1,
			MaxAge:                 kc.TTL,
			MaxMsgSize:             -1,
			Storage:                kc.Storage,
			Replicas:               kc.Replicas,
			AllowRollup:            markers,
			DenyDelete:             true,
			Duplicates:             dup,
			MaxMsgs:                -1,
			MaxConsumers:           -1,
			AllowDirect:            true,
			Discard:                jetstream.DiscardNew,
			AllowMsgTTL:            markers || perKeyTTL[kc.Bucket],
			SubjectDeleteMarkerTTL: kc.LimitMarkerTTL,
		})
	}
	return out
}

// Ensure creates or updates every stream and bucket of the topology, with
// the settings of c; see [Topology.Reconcile], whose report it drops.
func (t Topology) Ensure(ctx context.Context, js jetstream.JetStream, c Config) error {
	_, err := t.Reconcile(ctx, js, c)
	return err
}

// Reconcile creates or updates every stream and bucket of the topology. It
// is idempotent. Only the topology's owner calls it — the dispatcher and
// `ax dev` — and the others [Topology.Require] what they use.
//
// The settings have one owner, the installation: a setting that c leaves
// zero (unset) keeps the value the installed stream or bucket has — a
// second dispatcher started without --replicas or --lease-ttl follows the
// first one's — and takes its default only where nothing is installed. A
// setting that c states and that differs from the installed value is
// refused with a [*SettingsError] naming the flag and --reconfigure, and
// changes nothing, unless c.Reconfigure is set. The returned [Ensured] holds
// the settings in force, which the caller follows, and the settings that
// differed.
//
// It creates first and updates only a stream or bucket whose settings
// differ: a create with the settings a stream has changes nothing, where an
// update rewrites the stream's configuration on every start, which
// nats-server 2.15.3 does without holding the lock its consumer creation
// reads it under (a data race -race reported while a dispatcher started
// beside an executor creating its consumers).
func (t Topology) Reconcile(ctx context.Context, js jetstream.JetStream, c Config) (Ensured, error) {
	installed, err := t.installed(ctx, js)
	if err != nil {
		return Ensured{}, err
	}
	eff, diffs := t.reconcile(c, installed)
	out := Ensured{Config: eff, Differences: diffs}
	if len(diffs) > 0 && !c.Reconfigure {
		return out, &SettingsError{Differences: diffs}
	}
	for _, sc := range append(t.StreamConfigs(eff), t.BucketStreamConfigs(eff)...) {
		_, err := js.CreateStream(ctx, sc)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			if sc.Name == t.TriggersStream() {
				err = t.migrateTriggers(ctx, js, sc)
			} else {
				_, err = js.UpdateStream(ctx, sc)
			}
		}
		if err != nil {
			return out, t.ensureError(sc, err)
		}
	}
	return out, nil
}

// JetStream's error codes for a stream whose limits ask for more storage
// than the server has left (nats-server's JSInsufficientResourcesErr,
// JSStorageResourcesExceededErr, JSMemoryResourcesExceededErr).
var errCodesInsufficient = []jetstream.ErrorCode{10023, 10047, 10028}

// ensureError names the stream, and for a stream whose MaxBytes the server
// cannot reserve, the bytes asked and the setting that lowers them.
func (t Topology) ensureError(sc jetstream.StreamConfig, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && slices.Contains(errCodesInsufficient, apiErr.ErrorCode) && sc.MaxBytes > 0 {
		hint := "give the server's JetStream more storage (max_file_store)"
		if sc.Storage == jetstream.MemoryStorage {
			hint = "give the server's JetStream more memory (max_memory_store)"
		}
		for _, s := range settings {
			if s.field == fieldMaxBytes && slices.Contains(s.streams(t), sc.Name) {
				hint += " or lower " + s.flag + " (env " + s.env + ")"
			}
		}
		// %v, not %w: the server answers 5xx, which reads as transient,
		// and waiting does not make storage; the operator must act.
		return fmt.Errorf("ensure stream %s: %v: its MaxBytes asks the server to reserve %d bytes (%s) of %s storage; %s",
			sc.Name, err, sc.MaxBytes, humanBytes(sc.MaxBytes), strings.ToLower(sc.Storage.String()), hint)
	}
	return fmt.Errorf("ensure stream %s: %w", sc.Name, err)
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + " GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}

// installed reads the configuration of every stream and bucket stream of
// the topology that exists, by stream name.
func (t Topology) installed(ctx context.Context, js jetstream.JetStream) (map[string]jetstream.StreamConfig, error) {
	out := map[string]jetstream.StreamConfig{}
	for _, name := range t.streamNames() {
		s, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("look up stream %s: %w", name, err)
		}
		out[name] = s.CachedInfo().Config
	}
	return out, nil
}

// migrateTriggers updates AX_TRIGGERS to sc. An earlier AX made it with
// message schedules (and so rollups) and the ax.sched subjects, which
// nats-server cannot switch off on a stream ("message schedules can not
// be disabled"): such a stream is deleted and made again, when it holds no
// pending schedule and no firing the dispatchers have not taken. Otherwise
// the error says what it holds and how to go on.
func (t Topology) migrateTriggers(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	stream, err := js.Stream(ctx, sc.Name)
	if err != nil {
		return err
	}
	if old := stream.CachedInfo().Config; !old.AllowMsgSchedules {
		_, err = js.UpdateStream(ctx, sc)
		return err
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(t.subject("sched", ">")))
	if err != nil {
		return err
	}
	var pending uint64
	for _, n := range info.State.Subjects {
		pending += n
	}
	var unread uint64
	if cons, err := stream.Consumer(ctx, t.DispatcherConsumer().Durable); err == nil {
		ci, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		unread = ci.NumPending + uint64(ci.NumAckPending)
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return err
	}
	if pending > 0 || unread > 0 {
		return fmt.Errorf("stream %s was made by an earlier AX with message schedules, which let any publisher purge it or "+
			"write as the API, and which nats-server cannot switch off: it must be made again, but it holds %d pending "+
			"delayed firings and %d firings not yet taken; run the earlier dispatcher until they are done, or drop them "+
			"with `nats stream rm %s`, then start again", sc.Name, pending, unread, sc.Name)
	}
	if err := js.DeleteStream(ctx, sc.Name); err != nil {
		return err
	}
	_, err = js.CreateStream(ctx, sc)
	return err
}

// Require looks up the named streams and buckets without changing them,
// for a service that uses the topology but does not own it. It returns an
// error naming the first one that is missing, with the fix.
func (t Topology) Require(ctx context.Context, js jetstream.JetStream, streams, buckets []string) error {
	const hint = "AX's streams and buckets are made by the dispatcher: start `ax dispatcher` or `ax dev` first"
	for _, name := range streams {
		if _, err := js.Stream(ctx, name); err != nil {
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("look up stream %s: %w; %s", name, err, hint)
			}
			return fmt.Errorf("look up stream %s: %w", name, err)
		}
	}
	for _, name := range buckets {
		if _, err := js.KeyValue(ctx, name); err != nil {
			if errors.Is(err, jetstream.ErrBucketNotFound) {
				return fmt.Errorf("look up bucket %s: %w; %s", name, err, hint)
			}
			return fmt.Errorf("look up bucket %s: %w", name, err)
		}
	}
	return nil
}
