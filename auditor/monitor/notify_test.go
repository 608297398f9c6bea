package monitor

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

func TestNotificationPayloads(t *testing.T) {
	t.Parallel()
	first := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	svc := &Service{opts: Options{ConsoleURL: "https://ax.example/"}}
	n := svc.notification(schemas.Alert{ID: 7, Rule: "backlog", Level: schemas.AlertP2, Key: "etl", Task: "etl", InstanceID: 42,
		Reason: "12 instances waited", Count: 5, NotifiedCount: 2, FirstSeen: first, LastSeen: first.Add(time.Minute)}, StatusFiring, 3)
	if n.Link != "https://ax.example/#/instances/42/logs" || n.Repeats != 3 {
		t.Errorf("notification = %+v", n)
	}
	body, err := n.payload(schemas.ChannelWebhook)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"status": "firing", "alert_id": 7.0, "rule": "backlog", "level": "P2", "key": "etl", "task": "etl",
		"instance_id": 42.0, "link": n.Link, "reason": "12 instances waited", "count": 5.0, "repeats": 3.0, "first_seen": "2025-03-01T12:00:00Z"} {
		if m[k] != want {
			t.Errorf("webhook %s = %v, want %v", k, m[k], want)
		}
	}
	body, _ = n.payload(schemas.ChannelSlack)
	if want := `{"text":"*[P2] FIRING backlog: etl*\nTask: etl\nInstance: 42 (\u003chttps://ax.example/#/instances/42/logs|logs\u003e)\nLevel: P2\nReason: 12 instances waited\nSeen 5 times since 2025-03-01T12:00:00Z (3 since the last notification)"}`; string(body) != want {
		t.Errorf("slack payload =\n%s\nwant\n%s", body, want)
	}
	// A fleet-wide alert names no task nor instance.
	resolved := first.Add(time.Hour)
	n = svc.notification(schemas.Alert{ID: 8, Rule: "failing_tasks", Level: schemas.AlertP0, Reason: "6 tasks failed", Count: 2,
		FirstSeen: first, ResolvedAt: &resolved}, StatusResolved, 0)
	body, _ = n.payload(schemas.ChannelWeCom)
	if want := `{"markdown":{"content":"\u003cfont color=\"info\"\u003e[P0] RESOLVED failing_tasks\u003c/font\u003e\n\u003e Level: P0\n\u003e Reason: 6 tasks failed\n\u003e Resolved at 2025-03-01T13:00:00Z after 2 occurrences since 2025-03-01T12:00:00Z"},"msgtype":"markdown"}`; string(body) != want {
		t.Errorf("wecom payload =\n%s\nwant\n%s", body, want)
	}
}

func TestSendReportsRefusals(t *testing.T) {
	t.Parallel()
	r := newReceiver(t)
	svc := &Service{}
	allowLoopback(t, svc)
	n := Notification{Status: StatusFiring, Rule: "backlog", Level: schemas.AlertP2, Reason: "r"}
	if err := svc.send(context.Background(), schemas.AlertChannel{ID: 1, Kind: schemas.ChannelWeCom, URL: r.URL}, n); err != nil {
		t.Errorf("send to a WeCom robot that took it: %v", err)
	}
	r.mu.Lock()
	r.answer = `{"errcode":93000,"errmsg":"invalid webhook url"}`
	r.mu.Unlock()
	if err := svc.send(context.Background(), schemas.AlertChannel{ID: 1, Kind: schemas.ChannelWeCom, URL: r.URL}, n); err == nil ||
		!strings.Contains(err.Error(), "the WeCom robot refused the message: errcode 93000") || strings.Contains(err.Error(), "invalid webhook url") {
		t.Errorf("send to a WeCom robot that refused it = %v", err)
	}
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no_service", http.StatusNotFound)
	}))
	defer down.Close()
	if err := svc.send(context.Background(), schemas.AlertChannel{ID: 2, Kind: schemas.ChannelSlack, URL: down.URL}, n); err == nil ||
		err.Error() != "notify channel 2: slack answered 404 Not Found" {
		t.Errorf("send to a Slack webhook that is gone = %v", err)
	}
	if err := svc.send(context.Background(), schemas.AlertChannel{ID: 3, Kind: schemas.ChannelWebhook, URL: "http://127.0.0.1:1/x"}, n); err == nil ||
		!strings.HasPrefix(err.Error(), "notify channel 3: ") {
		t.Errorf("send to nowhere = %v", err)
	}
}

// allowLoopback lets s send to the loopback test receivers, as an
// operator would name an internal receiver in the allow list.
func allowLoopback(t *testing.T, s *Service) {
	t.Helper()
	dest, err := DestinationPolicy{Allow: []string{"127.0.0.1"}}.compile()
	if err != nil {
		t.Fatal(err)
	}
	s.dest, s.http = dest, dest.client(5*time.Second)
}
