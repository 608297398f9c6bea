package dispatcher

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// A dispatcher whose options state a lease TTL other than the installed
// one refuses to start, names --lease-ttl and --reconfigure, logs the
// difference and shows it in ax_topology_setting_mismatch; the bucket
// keeps its TTL (issue 25, item 3).
func TestDispatcherRefusesADifferentTopologySetting(t *testing.T) {
	t.Parallel()
	srv := streamstest.NewServer(t, streams.Config{LeaseTTL: 5 * time.Second})
	conn, js := srv.Connect()
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	d, err := New(Options{Conn: conn, Store: store.New(storetest.NewDB(t)), Metrics: reg, Logger: zerolog.New(&logs),
		Streams: streams.Config{LeaseTTL: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	err = d.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "--lease-ttl") || !strings.Contains(err.Error(), "--reconfigure") {
		t.Fatalf("Run = %v, want a refusal naming --lease-ttl and --reconfigure", err)
	}
	if v := testutil.ToFloat64(d.metrics.settingMismatch.WithLabelValues("lease_ttl")); v != 1 {
		t.Errorf(`ax_topology_setting_mismatch{setting="lease_ttl"} = %v, want 1`, v)
	}
	if !strings.Contains(logs.String(), `"setting":"lease_ttl"`) {
		t.Errorf("the dispatcher logged no line naming the setting: %s", logs.String())
	}
	kv, err := js.KeyValue(t.Context(), srv.Topology.LeasesBucket())
	if err != nil {
		t.Fatal(err)
	}
	if st, err := kv.Status(t.Context()); err != nil || st.TTL() != 5*time.Second {
		t.Errorf("the leases bucket's TTL after the refusal: %v, %v; want 5s", st, err)
	}
}
