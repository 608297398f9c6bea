package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/store/storetest"
)

func TestMonitorAddr(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		host string
		port int
		ok   bool
	}{
		{"127.0.0.1:8222", "127.0.0.1", 8222, true},
		{"0.0.0.0:9222", "0.0.0.0", 9222, true},
		{"off", "", 0, true},
		{"", "", 0, true},
		{"8222", "", 0, false},
		{"127.0.0.1:0", "", 0, false},
		{"127.0.0.1:http", "", 0, false},
	} {
		host, port, err := monitorAddr(tt.in)
		if (err == nil) != tt.ok || host != tt.host || port != tt.port {
			t.Errorf("monitorAddr(%q) = %q, %d, %v; want %q, %d, ok %t", tt.in, host, port, err, tt.host, tt.port, tt.ok)
		}
	}
}

func TestCheckClusterSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n    int
		want string // "" for no error
	}{
		{1, ""},
		{3, ""},
		{5, ""},
		{2, "--cluster 2: a JetStream cluster of two nodes cannot lose one"},
		{0, "--cluster 0: give the number of NATS nodes"},
		{-1, "--cluster -1: give the number of NATS nodes"},
	} {
		err := checkClusterSize(tc.n)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)) {
			t.Errorf("checkClusterSize(%d) = %v, want %q", tc.n, err, tc.want)
		}
	}
}

// TestDevHistoryFlags checks that ax dev takes the dispatcher's history
// flags and refuses a bad one before it starts anything.
func TestDevHistoryFlags(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"dev", "--help"}, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("ax dev --help: exit %d: %s", code, errOut.String())
	}
	for _, flag := range []string{"--history-after", "--history-retention", "--history-archive", "--history-period"} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("ax dev --help does not list %s", flag)
		}
	}
	out.Reset()
	code := run(t.Context(), []string{"dev", "--data", t.TempDir(), "--history-retention", "three months"}, strings.NewReader(""), &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "--history-retention:") {
		t.Errorf("ax dev --history-retention \"three months\": exit %d, stderr %q, want a refusal naming the flag", code, errOut.String())
	}
	if strings.Contains(out.String(), "AX is running") {
		t.Errorf("ax dev started with a bad --history-retention: %s", out.String())
	}
}

func TestCheckLeaseTTL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    time.Duration
		want string // "" for no error
	}{
		{time.Second, ""},
		{30 * time.Second, ""},
		{999 * time.Millisecond, "--lease-ttl 999ms: give at least 1s"},
		{0, "--lease-ttl 0s: give at least 1s"},
	} {
		err := checkLeaseTTL(tc.d)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)) {
			t.Errorf("checkLeaseTTL(%v) = %v, want %q", tc.d, err, tc.want)
		}
	}
}

// TestDevBannerOnlyOnceListening takes, in turn, the address ax dev's API
// and its metrics are to listen on: ax dev must say so and exit without
// its banner, which names those addresses as listening (it printed the
// banner first, and failed after).
func TestDevBannerOnlyOnceListening(t *testing.T) {
	t.Parallel()
	for _, taken := range []string{"--http", "--metrics-addr"} {
		t.Run(taken, func(t *testing.T) {
			t.Parallel()
			held, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			addrs := map[string]string{"--http": "127.0.0.1:0", "--metrics-addr": "127.0.0.1:0", "--nats": "127.0.0.1:0"}
			addrs[taken] = held.Addr().String()
			args := []string{"dev", "--data", t.TempDir(), "--database-url", storetest.URL(t), "--nats-monitor", "off", "--log-level", "warn"}
			for flag, addr := range addrs {
				args = append(args, flag, addr)
			}
			var out, errOut bytes.Buffer
			code := run(t.Context(), args, strings.NewReader(""), &out, &errOut)
			if code != 1 || !strings.Contains(errOut.String(), "address already in use") {
				t.Errorf("ax dev %s <taken>: exit %d, stderr %q, want exit 1 saying the address is in use", taken, code, errOut.String())
			}
			if strings.Contains(out.String(), "AX is running") {
				t.Errorf("ax dev %s <taken> printed its banner before it failed:\n%s", taken, out.String())
			}
		})
	}
}
