package natsembed_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/internal/natsembed"
)

// TestMonitorPortServesJsz starts a server with its monitoring port open
// and reads a consumer's lag from /jsz the way prometheus-nats-exporter
// (-jsz=all) and KEDA's nats-jetstream scaler do.
func TestMonitorPortServesJsz(t *testing.T) {
	t.Parallel()
	s, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir(), MonitorPort: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	mon := s.MonitorAddr()
	if mon == nil || !mon.IP.IsLoopback() {
		t.Fatalf("monitoring address = %v, want one on loopback", mon)
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "WORK", Subjects: []string{"work.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, "WORK", jetstream.ConsumerConfig{Durable: "pool", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := js.Publish(ctx, "work.a", nil); err != nil {
			t.Fatal(err)
		}
	}
	r, err := http.Get("http://" + mon.String() + "/jsz?consumers=true&config=true")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var info server.JSInfo
	if err := json.NewDecoder(r.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	for _, acc := range info.AccountDetails {
		for _, st := range acc.Streams {
			for _, c := range st.Consumer {
				if st.Name == "WORK" && c.Name == "pool" {
					if c.NumPending != 3 {
						t.Errorf("/jsz: num_pending = %d, want 3", c.NumPending)
					}
					return
				}
			}
		}
	}
	t.Errorf("/jsz does not list consumer pool of WORK: %+v", info)
}

// TestMonitorPortClosedByDefault: no monitoring port unless asked.
func TestMonitorPortClosedByDefault(t *testing.T) {
	t.Parallel()
	s, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if mon := s.MonitorAddr(); mon != nil {
		t.Errorf("monitoring address = %v, want none", mon)
	}
}
