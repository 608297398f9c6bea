package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// addLine adds line i of d to sh: message "line i", field n = i.
func addLine(sh *logShipper, d *schemas.Dispatch, at time.Time, i int) {
	sh.add(d, slog.LevelInfo, at, fmt.Sprintf("line %d", i), []field{{"n", json.RawMessage(strconv.Itoa(i))}})
}

// newPublisher returns a publisher on nc, closed when the test ends.
func newPublisher(t *testing.T, nc *nats.Conn, timeout time.Duration) *streams.Publisher {
	t.Helper()
	pub, err := streams.NewPublisher(nc, streams.PublisherOptions{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Close)
	return pub
}

// runShipper runs sh until the test ends.
func runShipper(t *testing.T, sh *logShipper, pub *streams.Publisher) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sh.run(ctx, pub)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// TestLogShipperDropsOldestAndNeverBlocks ships to a subject whose
// publishes are never acknowledged until the test says so: the shipper's
// goroutine is stuck awaiting a batch, and the handler's writes go on
// without waiting, dropping the oldest lines of a full buffer.
func TestLogShipperDropsOldestAndNeverBlocks(t *testing.T) {
	t.Parallel()
	srv := streamstest.NewServer(t, streams.Config{})
	nc, _ := srv.Connect()
	// No stream takes blocked.log.>: the test answers in the stream's place.
	topo, err := streams.NewTopology("blocked")
	if err != nil {
		t.Fatal(err)
	}
	held, err := nc.SubscribeSync(topo.Prefix() + ".log.>")
	if err != nil {
		t.Fatal(err)
	}
	// The server must know of the subscription before the shipper
	// publishes on another connection: a publish that finds no responder is
	// retried later by the client, behind the lines published after it.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	pubConn, _ := srv.Connect()
	sh := newLogShipper("w1", topo, 10, time.Hour, slog.New(slog.DiscardHandler))
	runShipper(t, sh, newPublisher(t, pubConn, time.Minute))
	d := &schemas.Dispatch{InstanceID: 7, Attempt: 1, Task: "t"}
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

	// Ten lines fill a batch: the shipper publishes them and waits.
	for i := range 10 {
		addLine(sh, d, at.Add(time.Duration(i)*time.Millisecond), i)
	}
	first := receive(t, held, 10)
	for i, m := range first {
		if l := decodeLine(t, m); l.Message != fmt.Sprintf("line %d", i) {
			t.Fatalf("line %d of the first batch is %+v", i, l)
		}
	}

	// A thousand more while it waits: none blocks, the buffer keeps the
	// newest ten and counts the rest.
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for i := 10; i < 1010; i++ {
			addLine(sh, d, at.Add(time.Duration(i)*time.Millisecond), i)
		}
	}()
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("writes blocked while NATS held the shipper's batch")
	}
	if n := sh.dropped(); n != 990 {
		t.Errorf("dropped = %d, want 990", n)
	}

	// Acknowledge the first batch: the next one says how many lines were
	// lost, then carries the ten newest.
	flushed := make(chan error, 1)
	go func() { flushed <- sh.flush(t.Context()) }()
	ack(t, first)
	second := receive(t, held, 11)
	warning := decodeLine(t, second[0])
	if warning.Level != "warn" || warning.Message != "990 log lines dropped" || string(warning.Fields) != `{"dropped":990}` ||
		warning.InstanceID != 7 || warning.Attempt != 1 || warning.Task != "t" || warning.WorkerID != "w1" ||
		!warning.Time.Equal(at.Add(999*time.Millisecond)) {
		t.Errorf("warning = %+v", warning)
	}
	for i, m := range second[1:] {
		if l := decodeLine(t, m); l.Message != fmt.Sprintf("line %d", 1000+i) || string(l.Fields) != fmt.Sprintf(`{"n":%d}`, 1000+i) {
			t.Errorf("line %d of the second batch is %+v", i, l)
		}
	}
	ack(t, second)
	select {
	case err := <-flushed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("flush did not return once every line was acknowledged")
	}
}

// receive returns the next n messages of sub.
func receive(t *testing.T, sub *nats.Subscription, n int) []*nats.Msg {
	t.Helper()
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("message %d of %d: %v", i+1, n, err)
		}
		msgs[i] = m
	}
	return msgs
}

// ack answers each message as JetStream would on storing it.
func ack(t *testing.T, msgs []*nats.Msg) {
	t.Helper()
	for i, m := range msgs {
		if err := m.Respond(fmt.Appendf(nil, `{"stream":"BLOCKED_LOGS","seq":%d}`, i+1)); err != nil {
			t.Fatal(err)
		}
	}
}

func decodeLine(t *testing.T, m *nats.Msg) schemas.LogLine {
	t.Helper()
	l, err := streams.Decode[schemas.LogLine](m.Subject, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if want := "blocked.log.7.w1"; m.Subject != want {
		t.Errorf("subject %s, want %s", m.Subject, want)
	}
	return l
}

// TestLogShipperShipsTheRestOnStop stops the shipper with lines waiting:
// they are in AX_LOGS when run returns, and NATS refusing lines counts them
// as dropped.
func TestLogShipperShipsTheRestOnStop(t *testing.T) {
	t.Parallel()
	srv := streamstest.NewServer(t, streams.Config{})
	nc, js := srv.Connect()
	pub := newPublisher(t, nc, opTimeout)
	sh := newLogShipper("w1", srv.Topology, 100, time.Hour, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sh.run(ctx, pub)
	}()
	d := &schemas.Dispatch{InstanceID: 7, Attempt: 1, Task: "t"}
	for i := range 3 {
		addLine(sh, d, time.Now(), i)
	}
	cancel()
	<-done
	s, err := js.Stream(t.Context(), srv.Topology.LogsStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter(srv.Topology.Log(7, "w1")))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 3 || sh.dropped() != 0 {
		t.Errorf("AX_LOGS holds %d lines and %d were dropped, want 3 and 0", info.State.Msgs, sh.dropped())
	}

	// A line no stream takes is refused and counted, and the warning about
	// it, refused too, is kept for a later batch.
	other, err := streams.NewTopology("nostream")
	if err != nil {
		t.Fatal(err)
	}
	lost := newLogShipper("w1", other, 100, time.Hour, slog.New(slog.DiscardHandler))
	addLine(lost, d, time.Now(), 0)
	lost.ship(pub)
	if n := lost.dropped(); n != 1 {
		t.Errorf("dropped = %d, want 1", n)
	}
	if dr := lost.drops[attemptKey{7, 1}]; dr == nil || dr.n != 1 {
		t.Errorf("pending drop warning = %+v, want one line of 7/1", dr)
	}
}

// The handler's slog records become log lines: attributes in order,
// groups as nested objects, With attributes first, the line's own keys
// left out at the top level, levels mapped to the line's names.
func TestTaskLogger(t *testing.T) {
	t.Parallel()
	var got []capturedLine
	sink := &captureSink{min: slog.LevelDebug, lines: &got}
	log := newTaskLogger(sink).With("order", 42)
	log.Info("charged", "ok", true, "task", "dropped", slog.Group("card", "brand", "visa", "last4", "4242"))
	log.WithGroup("req").With("id", "r1").Warn("slow", "took", 1500*time.Millisecond, "err", errors.New("timeout"))
	log.WithGroup("empty").Error("failed")
	log.Debug("detail", "f", 1.5, "nan", math.NaN(), "at", time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC), "raw", map[string]int{"a": 1})
	log.Log(context.Background(), slog.LevelDebug-4, "trace is below the sink's level")
	log.Log(context.Background(), slog.LevelError+4, "above error is error")
	want := []capturedLine{
		{"info", "charged", `{"order":42,"ok":true,"card":{"brand":"visa","last4":"4242"}}`},
		{"warn", "slow", `{"order":42,"req":{"id":"r1","took":"1.5s","err":"timeout"}}`},
		{"error", "failed", `{"order":42}`},
		{"debug", "detail", `{"order":42,"f":1.5,"nan":"NaN","at":"2025-03-01T12:00:00Z","raw":{"a":1}}`},
		{"error", "above error is error", `{"order":42}`},
	}
	if len(got) != len(want) {
		t.Fatalf("lines %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

type capturedLine struct {
	level  string // the line's level name
	msg    string
	fields string
}

type captureSink struct {
	min   slog.Level
	mu    sync.Mutex
	lines *[]capturedLine
}

func (c *captureSink) enabled(l slog.Level) bool { return l >= c.min }

func (c *captureSink) line(l slog.Level, _ time.Time, msg string, fields []field) {
	c.mu.Lock()
	defer c.mu.Unlock()
	*c.lines = append(*c.lines, capturedLine{levelName(l), msg, string(encodeFields(fields))})
}

func TestFitLine(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", maxLogLine)
	blob, _ := json.Marshal(long)
	msg, fields := fitLine(long, []field{{"blob", blob}})
	if !strings.HasPrefix(long, strings.TrimSuffix(msg, "…")) || !strings.HasSuffix(msg, "é…") || len(msg) > maxLogLine/2+8 ||
		string(fields) != fmt.Sprintf(`{"truncated_from_bytes":%d}`, len(long)+len(blob)+len("blob")+4) {
		t.Errorf("truncated line: message of %d bytes, fields %s", len(msg), fields)
	}
	if msg, fields := fitLine("short", []field{{"n", json.RawMessage("1")}}); msg != "short" || string(fields) != `{"n":1}` {
		t.Errorf("a short line changed: %q %s", msg, fields)
	}
}

// TestFlushOfNothingCostsNothing pins the log flush before every final
// report: an attempt that logged nothing (most of them) makes no timeout,
// no timer and no context for it.
func TestFlushOfNothingCostsNothing(t *testing.T) {
	s := &Service{logs: newLogShipper("w1", streams.Default(), 16, time.Second, slog.New(slog.DiscardHandler))}
	a := &attempt{log: slog.New(slog.DiscardHandler)}
	if got := testing.AllocsPerRun(100, func() { s.flushLogs(a) }); got != 0 {
		t.Errorf("flushLogs with nothing to ship: %v allocations, want 0", got)
	}
}
