package monitor

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
)

// target is an HTTP server on a loopback address that counts what reaches
// it.
type target struct {
	*httptest.Server
	mu    sync.Mutex
	hits  int
	auths []string
}

func newTarget(t *testing.T, addr string, h http.HandlerFunc) *target {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	tg := &target{}
	tg.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.mu.Lock()
		tg.hits++
		tg.auths = append(tg.auths, r.Header.Get("Authorization"))
		tg.mu.Unlock()
		if h != nil {
			h(w, r)
		}
	}))
	tg.Listener = l
	tg.Start()
	t.Cleanup(tg.Close)
	return tg
}

func (tg *target) count() int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.hits
}

func policyService(t *testing.T, p DestinationPolicy) *Service {
	t.Helper()
	dest, err := p.compile()
	if err != nil {
		t.Fatal(err)
	}
	return &Service{dest: dest, http: dest.client(5 * 1e9)}
}

// TestDestinationPolicy points alert channels at internal addresses in
// every spelling an attacker would try, and checks that no request reaches
// them, that a redirect cannot lead there, and that no answer's body is
// ever part of the error that is logged.
func TestDestinationPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The internal service a hostile channel aims at, on loopback.
	internal := newTarget(t, "127.0.0.1:0", nil)
	_, port, _ := net.SplitHostPort(internal.Listener.Addr().String())
	// The receiver an operator allowed, on another loopback address.
	var redirectTo string
	receiver := newTarget(t, "127.0.0.2:0", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, redirectTo, http.StatusFound)
		case "/fail":
			http.Error(w, "SECRET-BODY of the receiver", http.StatusInternalServerError)
		}
	})
	n := Notification{Status: StatusFiring, Rule: "backlog", Level: schemas.AlertP2, Reason: "r"}
	deny := policyService(t, DestinationPolicy{})
	allowReceiver := policyService(t, DestinationPolicy{Allow: []string{"127.0.0.2"}})
	send := func(svc *Service, url string) error {
		return svc.send(ctx, schemas.AlertChannel{ID: 9, Kind: schemas.ChannelWebhook, URL: url}, n)
	}

	for _, url := range []string{
		"http://127.0.0.1:" + port + "/",
		"http://localhost:" + port + "/", // a name that resolves to loopback
		"http://[::1]:" + port + "/",
		"http://[::ffff:127.0.0.1]:" + port + "/",
		"http://0x7f000001:" + port + "/",
		"http://2130706433:" + port + "/",
		"http://0177.0.0.1:" + port + "/",
		"http://127.1:" + port + "/",
		"http://169.254.169.254/latest/meta-data/",
		"http://[fe80::1]/",
		"http://10.0.0.1/",
		"http://172.16.0.1/",
		"http://192.168.1.1/",
		"http://100.64.0.1/",
		"http://0.0.0.0:" + port + "/",
		"http://user:pass@127.0.0.1:" + port + "/",
		"ftp://127.0.0.1:" + port + "/",
	} {
		err := send(deny, url)
		if !errors.Is(err, errDenied) {
			t.Errorf("send to %s = %v, want refused by the policy", url, err)
		}
	}
	// Credentials go only to a host the allow list names, even public.
	if err := send(deny, "https://user:pass@alerts.example.com/"); !errors.Is(err, errDenied) {
		t.Errorf("send with credentials to a host not named = %v, want refused", err)
	}
	// An allowed receiver may not send the auditor on to a refused one.
	for _, to := range []string{"http://127.0.0.1:" + port + "/", "http://localhost:" + port + "/", "http://user:pw@127.0.0.1:" + port + "/"} {
		redirectTo = to
		if err := send(allowReceiver, receiver.URL+"/redirect"); !errors.Is(err, errDenied) {
			t.Errorf("a redirect to %s = %v, want refused", to, err)
		}
	}
	if got := internal.count(); got != 0 {
		t.Errorf("the internal service got %d requests, want none", got)
	}

	// What the allow list names is reached, credentials included; an
	// answer's body never shows in the error.
	if err := send(allowReceiver, "http://ops:s3cret@"+strings.TrimPrefix(receiver.URL, "http://")+"/"); err != nil {
		t.Errorf("send to the allowed receiver with credentials: %v", err)
	}
	receiver.mu.Lock()
	if len(receiver.auths) == 0 || !strings.HasPrefix(receiver.auths[len(receiver.auths)-1], "Basic ") {
		t.Errorf("the allowed receiver got Authorization %q, want the URL's credentials", receiver.auths)
	}
	receiver.mu.Unlock()
	err := send(allowReceiver, receiver.URL+"/fail?key=SECRET-KEY")
	if err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("send to a failing receiver = %v, want an error without its body or the URL's key", err)
	}
	if err := send(allowReceiver, "http://127.0.0.2:1/?key=SECRET-KEY"); err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("send to a closed port = %v, want an error without the URL's key", err)
	}
}

func TestDestinationPolicyAllowList(t *testing.T) {
	t.Parallel()
	if _, err := (DestinationPolicy{Allow: []string{"http://x/"}}).compile(); err == nil {
		t.Error("a URL in the allow list was accepted")
	}
	c, err := DestinationPolicy{Allow: []string{"10.20.0.0/16", "alerts.internal", "::1"}}.compile()
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{"10.20.3.4": true, "10.21.0.1": false, "alerts.internal": true,
		"ALERTS.internal.": true, "other.internal": false, "::1": true} {
		if got := c.allowedHost(host); got != want {
			t.Errorf("allowedHost(%s) = %t, want %t", host, got, want)
		}
	}
}
