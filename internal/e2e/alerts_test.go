package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/auditor"
	"github.com/ax-scheduler/ax/auditor/monitor"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/schemas"
)

// receiver is a local HTTP server standing in for an alert channel: it
// keeps the JSON bodies it is sent and answers as a WeCom robot does.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []json.RawMessage
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body json.RawMessage
		if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.bodies = append(r.bodies, body)
		r.mu.Unlock()
		fmt.Fprint(w, `{"errcode":0,"errmsg":"ok"}`)
	}))
	t.Cleanup(r.Close)
	return r
}

// wait waits until the receiver got n bodies and returns them.
func (r *receiver) wait(t *testing.T, n int) []json.RawMessage {
	t.Helper()
	var got []json.RawMessage
	waitFor(t, fmt.Sprintf("%d notifications at %s", n, r.URL), 60*time.Second, func() (bool, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		got = append([]json.RawMessage(nil), r.bodies...)
		return len(got) >= n, nil
	})
	return got
}

// monitor starts an auditor that refreshes often, registering its metrics
// in reg, and waits until it leads monitoring.
func (s *system) monitor(reg prometheus.Registerer) {
	s.t.Helper()
	conn, _ := s.srv.Connect()
	a, err := auditor.New(auditor.Options{Conn: conn, Store: s.store, PollInterval: 10 * time.Millisecond,
		RetryInterval: 100 * time.Millisecond, RefreshInterval: 50 * time.Millisecond, Logger: s.log, Metrics: reg,
		ConsoleURL: "http://console.test",
		// The receivers are loopback test servers: an internal receiver
		// is reached only when the allow list names it.
		Destinations: monitor.DestinationPolicy{Allow: []string{"127.0.0.1"}}, NotifyTimeout: 5 * time.Second})
	if err != nil {
		s.t.Fatal(err)
	}
	servicetest.Go(s.t, "auditor", a.Run)
	waitFor(s.t, "the auditor to monitor", 60*time.Second, func() (bool, error) { return a.Monitoring(), nil })
}

// TestConsecutiveFailuresAlertFiresAndResolves runs a task that fails three
// times in a row: the P1 alert reaches a webhook, a WeCom robot and a Slack
// webhook with the task, the instance, the level, the reason and the link
// to the instance's logs; the next success resolves it, and each receiver
// is told so.
func TestConsecutiveFailuresAlertFiresAndResolves(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	ctx := context.Background()
	var failing atomic.Bool
	failing.Store(true)
	mux := executor.NewMux()
	mux.HandleFunc("test.flaky", func(context.Context, *executor.Job) (any, error) {
		if failing.Load() {
			return nil, executor.Permanent(errors.New("disk full"))
		}
		return "ok", nil
	})
	s.executor("w1", mux, 2)

	hook, wecom, slack := newReceiver(t), newReceiver(t), newReceiver(t)
	for kind, url := range map[schemas.AlertChannelKind]string{schemas.ChannelWebhook: hook.URL, schemas.ChannelWeCom: wecom.URL, schemas.ChannelSlack: slack.URL} {
		if _, err := s.client.AddAlertChannel(ctx, wire.AlertChannelRequest{Kind: kind, URL: url}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.client.PutAlertRule(ctx, "consecutive_failures", wire.AlertRuleRequest{Kind: schemas.AlertConsecutiveFailures,
		Level: schemas.AlertP1, Params: json.RawMessage(`{"failures": 3}`)}); err != nil {
		t.Fatal(err)
	}
	s.monitor(nil)
	s.apply("task_name: nightly\nowner: data-team\nexecution: {handler: test.flaky}\n")

	var last int64
	for range 3 {
		last = s.fire("nightly", nil)
		s.waitState(last, schemas.StateFailed, 60*time.Second)
	}
	var firing monitor.Notification
	if err := json.Unmarshal(hook.wait(t, 1)[0], &firing); err != nil {
		t.Fatal(err)
	}
	link := fmt.Sprintf("http://console.test/#/instances/%d/logs", last)
	if firing.Status != monitor.StatusFiring || firing.Task != "nightly" || firing.InstanceID != last || firing.Level != schemas.AlertP1 ||
		firing.Rule != "consecutive_failures" || !strings.Contains(firing.Reason, "failed 3 times in a row; the last error: disk full") ||
		firing.Link != link {
		t.Errorf("webhook got %+v", firing)
	}
	for name, body := range map[string]string{"WeCom": string(wecom.wait(t, 1)[0]), "Slack": string(slack.wait(t, 1)[0])} {
		for _, want := range []string{"[P1] FIRING consecutive_failures: nightly", "Task: nightly", fmt.Sprint("Instance: ", last), link, "disk full"} {
			if !strings.Contains(body, want) {
				t.Errorf("%s got %s, without %q", name, body, want)
			}
		}
	}

	failing.Store(false)
	s.waitState(s.fire("nightly", nil), schemas.StateSucceeded, 60*time.Second)
	var resolved monitor.Notification
	if err := json.Unmarshal(hook.wait(t, 2)[1], &resolved); err != nil {
		t.Fatal(err)
	}
	if resolved.Status != monitor.StatusResolved || resolved.AlertID != firing.AlertID || resolved.Task != "nightly" || resolved.ResolvedAt == nil {
		t.Errorf("webhook got %+v, want the resolution of alert %d", resolved, firing.AlertID)
	}
	if !strings.Contains(string(wecom.wait(t, 2)[1]), "RESOLVED consecutive_failures: nightly") ||
		!strings.Contains(string(slack.wait(t, 2)[1]), "RESOLVED consecutive_failures: nightly") {
		t.Error("WeCom or Slack were not told of the resolution")
	}
	alerts, err := s.client.ListAlerts(ctx, apiclient.AlertQuery{})
	if err != nil || len(alerts) != 1 || alerts[0].State != schemas.AlertResolved || alerts[0].Count != 3 {
		t.Errorf("alerts = %+v, %v; want one resolved after 3 failures", alerts, err)
	}
}
