package metrics

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/internal/wait/waittest"
)

func TestMain(m *testing.M) { waittest.VerifyTestMain(m) }

func TestServeListener(t *testing.T) {
	reg := NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "ax_test_total", Help: "A test counter."})
	reg.MustRegister(c)
	c.Inc()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ServeListener(ctx, ln, reg, zerolog.Nop()) }()

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"ax_test_total 1", "go_goroutines", "process_"} {
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET /metrics: %d, without %q", resp.StatusCode, want)
		}
	}
	if resp, err := client.Get("http://" + ln.Addr().String() + "/other"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /other = %v, %v; want 404", resp, err)
	} else {
		resp.Body.Close()
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("ServeListener after the context ended = %v, want nil", err)
	}
}

func TestServeRefusesABadAddress(t *testing.T) {
	err := Serve(context.Background(), "127.0.0.1:notaport", NewRegistry(), zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "serve metrics: listen on 127.0.0.1:notaport") {
		t.Errorf("Serve = %v", err)
	}
}
