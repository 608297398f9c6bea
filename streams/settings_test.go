package streams_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/streams"
)

func connectTo(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc) // fails only on a bad option
	return js
}

func startServer(t *testing.T) jetstream.JetStream {
	t.Helper()
	s, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return connectTo(t, s.ClientURL())
}

// reconcile runs Reconcile until a cold cluster answers.
func reconcile(t *testing.T, js jetstream.JetStream, c streams.Config) (streams.Ensured, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out streams.Ensured
	err := streams.UntilStarted(ctx, func(err error, wait time.Duration) {
		t.Logf("Reconcile: %v; again in %s", err, wait)
	}, func(ctx context.Context) error {
		var err error
		out, err = streams.Default().Reconcile(ctx, js, c)
		return err
	})
	return out, err
}

func configOf(t *testing.T, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	st, err := js.Stream(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().Config
}

// Issue 25 item 3: a second dispatcher started without --replicas on a
// three-node cluster turned every stream and bucket from R3 to R1. An
// unset setting now keeps the installed value.
func TestReconcileKeepsTheReplicasOfACluster(t *testing.T) {
	t.Parallel()
	c, err := natsembed.StartCluster(natsembed.ClusterOptions{Size: 3, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	if err := c.WaitReady(time.Minute); err != nil {
		t.Fatal(err)
	}
	js := connectTo(t, c.URL())
	if _, err := reconcile(t, js, streams.Config{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	got, err := reconcile(t, js, streams.Config{})
	if err != nil {
		t.Fatalf("a second owner without --replicas: %v", err)
	}
	if got.Config.Replicas != 3 {
		t.Errorf("Reconcile says the replicas in force are %d, want the installed 3", got.Config.Replicas)
	}
	top := streams.Default()
	for _, sc := range append(top.StreamConfigs(streams.Config{}), top.BucketStreamConfigs(streams.Config{})...) {
		if r := configOf(t, js, sc.Name).Replicas; r != 3 {
			t.Errorf("%s has %d replicas after a second owner without --replicas, want 3", sc.Name, r)
		}
	}
}

// A second owner without --lease-ttl keeps the installed lease TTL, and
// follows it.
func TestReconcileKeepsTheLeaseTTL(t *testing.T) {
	t.Parallel()
	js := startServer(t)
	if _, err := reconcile(t, js, streams.Config{LeaseTTL: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	got, err := reconcile(t, js, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Config.LeaseTTL != 5*time.Second {
		t.Errorf("Reconcile says the lease TTL in force is %s, want the installed 5s", got.Config.LeaseTTL)
	}
	if ttl := configOf(t, js, "KV_"+streams.Default().LeasesBucket()).MaxAge; ttl != 5*time.Second {
		t.Errorf("the leases bucket's TTL is %s after a second owner without --lease-ttl, want 5s", ttl)
	}
}

// A stated setting that differs from the installed one is refused, naming
// the flag and --reconfigure, and changes nothing; with Reconfigure it is
// applied.
func TestReconcileRefusesADifferentSettingWithoutReconfigure(t *testing.T) {
	t.Parallel()
	js := startServer(t)
	leases := "KV_" + streams.Default().LeasesBucket()
	if _, err := reconcile(t, js, streams.Config{LeaseTTL: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	got, err := reconcile(t, js, streams.Config{LeaseTTL: 30 * time.Second, Replicas: 1})
	var se *streams.SettingsError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "--lease-ttl") || !strings.Contains(err.Error(), "--reconfigure") {
		t.Fatalf("Reconcile with another --lease-ttl = %v, want a refusal naming --lease-ttl and --reconfigure", err)
	}
	if len(got.Differences) != 1 || got.Differences[0].Setting != "lease_ttl" || got.Differences[0].Installed != "5s" || got.Differences[0].Asked != "30s" {
		t.Errorf("Differences = %+v, want lease_ttl installed 5s, asked 30s", got.Differences)
	}
	if ttl := configOf(t, js, leases).MaxAge; ttl != 5*time.Second {
		t.Errorf("the refused Reconcile changed the leases bucket's TTL to %s", ttl)
	}
	if _, err := reconcile(t, js, streams.Config{LeaseTTL: 30 * time.Second, Reconfigure: true}); err != nil {
		t.Fatalf("Reconcile with --reconfigure: %v", err)
	}
	if ttl := configOf(t, js, leases).MaxAge; ttl != 30*time.Second {
		t.Errorf("the leases bucket's TTL is %s after --reconfigure, want 30s", ttl)
	}
}

// A server without the storage AX_LOGS reserves gets an error that names
// the stream, the bytes asked and the setting that lowers them.
func TestReconcileSaysWhatStorageItNeeds(t *testing.T) {
	t.Parallel()
	js := startServer(t)
	const asked = 1 << 60
	_, err := reconcile(t, js, streams.Config{LogsMaxBytes: asked})
	if err == nil {
		t.Fatal("Reconcile reserved an exbibyte of task logs")
	}
	t.Log(err)
	for _, want := range []string{"AX_LOGS", "1152921504606846976 bytes", "--logs-max-bytes", "AX_LOGS_MAX_BYTES"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not say %q", err, want)
		}
	}
}

// An installation made before roll-ups were turned off (buckets made by
// nats.go's CreateKeyValue, the mutex and once buckets with limit
// markers) is updated: the buckets executors write refuse roll-ups after
// an Ensure, and keep per-message TTLs.
func TestEnsureTurnsRollupsOffOnAnOldInstallation(t *testing.T) {
	t.Parallel()
	js := startServer(t)
	top := streams.Default()
	for _, b := range []string{top.MutexBucket(), top.OnceBucket(), top.TasksBucket()} {
		kc := jetstream.KeyValueConfig{Bucket: b}
		if b != top.TasksBucket() {
			kc.LimitMarkerTTL = streams.MarkerTTL
		}
		if _, err := js.CreateKeyValue(t.Context(), kc); err != nil {
			t.Fatal(err)
		}
		if !configOf(t, js, "KV_"+b).AllowRollup {
			t.Fatalf("nats.go made %s without roll-ups; this test no longer shows the update", b)
		}
	}
	if _, err := reconcile(t, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{top.MutexBucket(), top.OnceBucket(), top.TasksBucket()} {
		cfg := configOf(t, js, "KV_"+b)
		if cfg.AllowRollup {
			t.Errorf("KV_%s allows roll-ups after Ensure", b)
		}
		if wantTTL := b != top.TasksBucket(); cfg.AllowMsgTTL != wantTTL {
			t.Errorf("KV_%s AllowMsgTTL = %v after Ensure, want %v", b, cfg.AllowMsgTTL, wantTTL)
		}
	}
}
