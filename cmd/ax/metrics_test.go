package main

import "testing"

// TestMetricsListenAddr: the metrics take no token, so a port alone is
// loopback's; every interface is asked for by name.
func TestMetricsListenAddr(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		":9090":           "127.0.0.1:9090",
		"0.0.0.0:9090":    "0.0.0.0:9090",
		"[::]:9090":       "[::]:9090",
		"127.0.0.1:9090":  "127.0.0.1:9090",
		"10.0.0.5:9090":   "10.0.0.5:9090",
		"metrics.lan:909": "metrics.lan:909",
	} {
		if got := metricsListenAddr(in); got != want {
			t.Errorf("metricsListenAddr(%q) = %q, want %q", in, got, want)
		}
	}
}
