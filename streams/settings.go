package streams

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// fieldKind is the stream configuration field a setting is stored in.
type fieldKind int

const (
	fieldReplicas fieldKind = iota
	fieldMaxAge
	fieldMaxBytes
	fieldDuplicates
)

// setting is one topology setting of [Config]: where it is installed, the
// flag and environment variable of `ax dispatcher` and `ax dev` that state
// it, and how to read and write it in a Config.
type setting struct {
	name  string // snake_case: the metric label and the log field
	flag  string
	env   string
	field fieldKind
	// streams returns the streams that hold it, in the order Reconcile
	// reads them: the first installed one is the installed value.
	streams func(Topology) []string
	get     func(Config) int64
	set     func(*Config, int64)
	dur     bool
}

func one(name func(Topology) string) func(Topology) []string {
	return func(t Topology) []string { return []string{name(t)} }
}

func durSetting(name, flag string, field fieldKind, stream func(Topology) string, p func(*Config) *time.Duration) setting {
	return setting{name: name, flag: flag, env: "AX_" + strings.ToUpper(name), field: field, streams: one(stream), dur: true,
		get: func(c Config) int64 { return int64(*p(&c)) },
		set: func(c *Config, v int64) { *p(c) = time.Duration(v) }}
}

// settings lists every setting of [Config] that Reconcile keeps.
var settings = []setting{
	{name: "replicas", flag: "--replicas", env: "AX_REPLICAS", field: fieldReplicas, streams: Topology.streamNames,
		get: func(c Config) int64 { return int64(c.Replicas) },
		set: func(c *Config, v int64) { c.Replicas = int(v) }},
	durSetting("duplicate_window", "--duplicate-window", fieldDuplicates, Topology.TriggersStream, func(c *Config) *time.Duration { return &c.DuplicateWindow }),
	durSetting("triggers_max_age", "--triggers-max-age", fieldMaxAge, Topology.TriggersStream, func(c *Config) *time.Duration { return &c.TriggersMaxAge }),
	durSetting("audit_max_age", "--audit-max-age", fieldMaxAge, Topology.AuditStream, func(c *Config) *time.Duration { return &c.AuditMaxAge }),
	durSetting("logs_max_age", "--logs-max-age", fieldMaxAge, Topology.LogsStream, func(c *Config) *time.Duration { return &c.LogsMaxAge }),
	{name: "logs_max_bytes", flag: "--logs-max-bytes", env: "AX_LOGS_MAX_BYTES", field: fieldMaxBytes, streams: one(Topology.LogsStream),
		get: func(c Config) int64 { return c.LogsMaxBytes },
		set: func(c *Config, v int64) { c.LogsMaxBytes = v }},
	durSetting("lease_ttl", "--lease-ttl", fieldMaxAge, Topology.leasesStream, func(c *Config) *time.Duration { return &c.LeaseTTL }),
	durSetting("worker_ttl", "--worker-ttl", fieldMaxAge, Topology.workersStream, func(c *Config) *time.Duration { return &c.WorkerTTL }),
	durSetting("once_ttl", "--once-ttl", fieldMaxAge, Topology.onceStream, func(c *Config) *time.Duration { return &c.OnceTTL }),
}

// Setting describes one topology setting, for the flags of the commands
// that own the topology.
type Setting struct {
	// Name is the setting's snake_case name: the label of a mismatch metric.
	Name string
	// Flag and Env are the flag and environment variable that state it.
	Flag, Env string
	// Duration tells a duration from a count (replicas, bytes).
	Duration bool
	// Default is the value of a new installation (nanoseconds for a
	// duration).
	Default int64
}

// Settings lists the settings that [Topology.Reconcile] keeps.
func Settings() []Setting {
	out := make([]Setting, len(settings))
	def := Config{}.withDefaults()
	for i, s := range settings {
		out[i] = Setting{Name: s.name, Flag: s.flag, Env: s.env, Duration: s.dur, Default: s.get(def)}
	}
	return out
}

// Set states setting name (a [Setting.Name]) in c; v is a count or, for a
// duration, nanoseconds. It panics on an unknown name.
func (c *Config) Set(name string, v int64) {
	for _, s := range settings {
		if s.name == name {
			s.set(c, v)
			return
		}
	}
	panic("streams: unknown setting " + name)
}

func (s setting) show(v int64) string {
	if s.dur {
		return time.Duration(v).String()
	}
	return strconv.FormatInt(v, 10)
}

func (s setting) installedValue(sc jetstream.StreamConfig) int64 {
	switch s.field {
	case fieldReplicas:
		return int64(max(sc.Replicas, 1))
	case fieldMaxAge:
		return int64(sc.MaxAge)
	case fieldMaxBytes:
		return sc.MaxBytes
	default:
		return int64(sc.Duplicates)
	}
}

// Difference is a setting whose value asked for differs from the
// installed one.
type Difference struct {
	// Setting is the setting's name ([Setting.Name]), Flag its flag.
	Setting, Flag string
	// Stream is the stream that holds the installed value.
	Stream string
	// Installed and Asked are the values, printed.
	Installed, Asked string
}

// Ensured is what [Topology.Reconcile] did.
type Ensured struct {
	// Config holds the settings in force, defaults filled in: a service
	// follows these, not its flags' defaults.
	Config Config
	// Differences are the stated settings that differed from the
	// installed ones: applied when Config.Reconfigure was set, refused
	// otherwise.
	Differences []Difference
}

// SettingsError refuses a change of installed topology settings that was
// not asked for with Reconfigure.
type SettingsError struct {
	Differences []Difference
}

func (e *SettingsError) Error() string {
	var b strings.Builder
	b.WriteString("topology settings differ from the installed ones, which AX keeps: ")
	for i, d := range e.Differences {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s is %s on %s, %s asks for %s", d.Setting, d.Installed, d.Stream, d.Flag, d.Asked)
	}
	b.WriteString(". Leave the flags unset to follow the installation, or add --reconfigure to change it")
	return b.String()
}

// reconcile returns the settings in force after an Ensure with c over the
// installed streams, and the stated settings that differ from them.
func (t Topology) reconcile(c Config, installed map[string]jetstream.StreamConfig) (Config, []Difference) {
	eff := c
	var diffs []Difference
	for _, s := range settings {
		asked := s.get(c)
		for _, name := range s.streams(t) {
			sc, ok := installed[name]
			if !ok {
				continue
			}
			have := s.installedValue(sc)
			switch {
			case asked == 0:
				s.set(&eff, have)
			case asked != have:
				diffs = append(diffs, Difference{Setting: s.name, Flag: s.flag, Stream: name,
					Installed: s.show(have), Asked: s.show(asked)})
			}
			break
		}
	}
	return eff.withDefaults(), diffs
}

// streamNames lists every stream of the topology, the buckets' included.
func (t Topology) streamNames() []string {
	return []string{t.TriggersStream(), t.DispatchStream(), t.ReportsStream(), t.AuditStream(), t.LogsStream(),
		t.workersStream(), t.leasesStream(), t.mutexStream(), t.onceStream(), t.tasksStream()}
}

func (t Topology) workersStream() string { return "KV_" + t.WorkersBucket() }
func (t Topology) leasesStream() string  { return "KV_" + t.LeasesBucket() }
func (t Topology) mutexStream() string   { return "KV_" + t.MutexBucket() }
func (t Topology) onceStream() string    { return "KV_" + t.OnceBucket() }
func (t Topology) tasksStream() string   { return "KV_" + t.TasksBucket() }
