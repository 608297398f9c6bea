package metrics

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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

// TestHandlerNegotiatesOpenMetrics serves the text format to a plain
// request and OpenMetrics, with exemplars, to a scraper that asks for it;
// a counter has the same series name in both.
func TestHandlerNegotiatesOpenMetrics(t *testing.T) {
	reg := NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "ax_test_total", Help: "A test counter."})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ax_test_seconds", Help: "A test histogram.", Buckets: []float64{1}})
	reg.MustRegister(c, h)
	c.Inc()
	h.(prometheus.ExemplarObserver).ObserveWithExemplar(0.5, prometheus.Labels{"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"})
	srv := httptest.NewServer(Handler(reg))
	defer srv.Close()
	get := func(accept string) (string, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.Header.Get("Content-Type"), string(body)
	}
	ctype, body := get("")
	if !strings.HasPrefix(ctype, "text/plain") || !strings.Contains(body, "ax_test_total 1") || strings.Contains(body, "trace_id") {
		t.Errorf("plain request: %s\n%s\nwant the text format without exemplars", ctype, body)
	}
	ctype, body = get("application/openmetrics-text; version=1.0.0; charset=utf-8")
	if !strings.HasPrefix(ctype, "application/openmetrics-text") || !strings.Contains(body, "ax_test_total 1") ||
		!strings.Contains(body, `ax_test_seconds_bucket{le="1.0"} 1 # {trace_id="4bf92f3577b34da6a3ce929d0e0e4736"} 0.5`) ||
		!strings.HasSuffix(body, "# EOF\n") {
		t.Errorf("OpenMetrics request: %s\n%s\nwant OpenMetrics with the exemplar", ctype, body)
	}
}
