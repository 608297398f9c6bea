package monitor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ax-scheduler/ax/internal/wait"
	"github.com/ax-scheduler/ax/schemas"
)

// Notification statuses.
const (
	StatusFiring   = "firing"
	StatusResolved = "resolved"
)

// Notification is what an alert channel is told: the JSON body a webhook
// channel receives, and what the WeCom and Slack messages are written from.
// A firing alert is notified when it opens and then at most once per its
// rule's throttle, with the repeats since the last notification grouped;
// its resolution is notified once.
type Notification struct {
	// Status is "firing" or "resolved".
	Status  string             `json:"status"`
	AlertID int64              `json:"alert_id"`
	Rule    string             `json:"rule"`
	Level   schemas.AlertLevel `json:"level"`
	// Key is what the alert is about: a task, a pool, or "" fleet-wide.
	Key  string `json:"key"`
	Task string `json:"task,omitempty"`
	// InstanceID is the latest instance that showed the condition, and
	// Link the console page of its logs; both are left out when the
	// alert names no instance.
	InstanceID int64  `json:"instance_id,omitempty"`
	Link       string `json:"link,omitempty"`
	Reason     string `json:"reason"`
	// Count is how often the condition was seen since FirstSeen; Repeats
	// how many of those this notification reports (since the last one).
	Count      int        `json:"count"`
	Repeats    int        `json:"repeats"`
	FirstSeen  time.Time  `json:"first_seen"`
	LastSeen   time.Time  `json:"last_seen"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
}

// notification makes the notification of alert a, with repeats grouped.
func (s *Service) notification(a schemas.Alert, status string, repeats int) Notification {
	n := Notification{Status: status, AlertID: a.ID, Rule: a.Rule, Level: a.Level, Key: a.Key, Task: a.Task,
		InstanceID: a.InstanceID, Reason: a.Reason, Count: a.Count, Repeats: repeats, FirstSeen: a.FirstSeen,
		LastSeen: a.LastSeen, ResolvedAt: a.ResolvedAt}
	if a.InstanceID != 0 {
		n.Link = strings.TrimRight(s.opts.ConsoleURL, "/") + "/#/instances/" + strconv.FormatInt(a.InstanceID, 10) + "/logs"
	}
	return n
}

// title is the notification's first line: "[P1] FIRING consecutive_failures: etl".
func (n Notification) title() string {
	t := fmt.Sprintf("[%s] %s %s", n.Level, strings.ToUpper(n.Status), n.Rule)
	if n.Key != "" {
		t += ": " + n.Key
	}
	return t
}

// lines are the notification's facts, one a line, with link formatting
// the console link for the channel's markup.
func (n Notification) lines(link func(url, text string) string) []string {
	var out []string
	if n.Task != "" {
		out = append(out, "Task: "+n.Task)
	}
	if n.InstanceID != 0 {
		out = append(out, fmt.Sprintf("Instance: %d (%s)", n.InstanceID, link(n.Link, "logs")))
	}
	out = append(out, "Level: "+string(n.Level), "Reason: "+n.Reason)
	if n.Status == StatusResolved {
		at := n.LastSeen
		if n.ResolvedAt != nil {
			at = *n.ResolvedAt
		}
		out = append(out, fmt.Sprintf("Resolved at %s after %d occurrences since %s", at.UTC().Format(time.RFC3339),
			n.Count, n.FirstSeen.UTC().Format(time.RFC3339)))
	} else {
		seen := fmt.Sprintf("Seen %d times since %s", n.Count, n.FirstSeen.UTC().Format(time.RFC3339))
		if n.Repeats > 1 && n.Repeats != n.Count {
			seen += fmt.Sprintf(" (%d since the last notification)", n.Repeats)
		}
		out = append(out, seen)
	}
	return out
}

// payload returns the request body a channel of kind receives for n.
func (n Notification) payload(kind schemas.AlertChannelKind) ([]byte, error) {
	switch kind {
	case schemas.ChannelWeCom:
		// A WeCom group robot: markdown, links as [text](url).
		lines := n.lines(func(url, text string) string { return "[" + text + "](" + url + ")" })
		color := "warning"
		if n.Status == StatusResolved {
			color = "info"
		}
		content := `<font color="` + color + `">` + n.title() + "</font>\n> " + strings.Join(lines, "\n> ")
		return json.Marshal(map[string]any{"msgtype": "markdown", "markdown": map[string]string{"content": content}})
	case schemas.ChannelSlack:
		// A Slack incoming webhook: mrkdwn, links as <url|text>.
		lines := n.lines(func(url, text string) string { return "<" + url + "|" + text + ">" })
		return json.Marshal(map[string]string{"text": "*" + n.title() + "*\n" + strings.Join(lines, "\n")})
	default:
		return json.Marshal(n)
	}
}

// send posts n to channel ch and returns an error when the receiver did
// not take it: a status other than 2xx, or a WeCom errcode other than 0.
func (s *Service) send(ctx context.Context, ch schemas.AlertChannel, n Notification) error {
	body, err := n.payload(ch.Kind)
	if err != nil {
		return fmt.Errorf("notify channel %d: encode: %w", ch.ID, err)
	}
	u, err := url.Parse(ch.URL)
	if err != nil {
		return fmt.Errorf("notify channel %d: %w", ch.ID, err)
	}
	if err := s.dest.checkURL(u); err != nil {
		return fmt.Errorf("notify channel %d: %w", ch.ID, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ch.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("notify channel %d: %w", ch.ID, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ax-auditor")
	resp, err := s.http.Do(req)
	if err != nil {
		// A *url.Error would repeat the URL, and with it the secret a
		// channel's URL holds (a Slack or WeCom key).
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("notify channel %d: %w", ch.ID, err)
	}
	defer resp.Body.Close()
	// The answer is never logged: a receiver the policy allows may still
	// answer with what it should not, and the log is read by others.
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("notify channel %d: %s answered %s", ch.ID, ch.Kind, resp.Status)
	}
	if ch.Kind == schemas.ChannelWeCom {
		var r struct {
			ErrCode int `json:"errcode"`
		}
		if err := json.Unmarshal(answer, &r); err != nil || r.ErrCode != 0 {
			// The errcode alone: the WeCom documentation explains each.
			return fmt.Errorf("notify channel %d: the WeCom robot refused the message: errcode %d", ch.ID, r.ErrCode)
		}
	}
	return nil
}

// notifyQueue is how many notifications may wait for the sender; more are
// dropped, with a log line.
const notifyQueue = 1024

// enqueue hands n to the sender without blocking the monitor.
func (s *Service) enqueue(n Notification) {
	select {
	case s.outbox <- n:
	default:
		s.log.Error().Int64("alert_id", n.AlertID).Str("rule", n.Rule).Str("status", n.Status).
			Msg("alert notification dropped: the sender is too far behind")
	}
}

// sender sends the queued notifications to every channel, in order, until
// ctx ends; then it sends what is queued for up to ShutdownTimeout. A
// channel that fails is tried once more after a second.
func (s *Service) sender(ctx context.Context) {
	work, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(s.opts.ShutdownTimeout, cancel) })
	defer stop()
	for {
		var n Notification
		select {
		case n = <-s.outbox:
		case <-ctx.Done():
			select {
			case n = <-s.outbox:
			default:
				return
			}
		}
		if work.Err() != nil {
			return
		}
		s.deliver(work, n)
	}
}

// deliver sends n to every channel.
func (s *Service) deliver(ctx context.Context, n Notification) {
	channels, err := s.opts.Store.ListAlertChannels(ctx)
	if err != nil {
		s.log.Error().Err(err).Int64("alert_id", n.AlertID).Msg("alert notification not sent")
		return
	}
	for _, ch := range channels {
		err := s.send(ctx, ch, n)
		if err != nil && wait.Sleep(ctx, time.Second) {
			err = s.send(ctx, ch, n)
		}
		result := "ok"
		if err != nil {
			result = "error"
			s.log.Error().Err(err).Int64("alert_id", n.AlertID).Str("channel_kind", string(ch.Kind)).Msg("alert notification failed")
		}
		s.metrics.notifications.WithLabelValues(string(ch.Kind), result).Inc()
	}
}
