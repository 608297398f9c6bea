package streams_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/internal/wait"
	"github.com/ax-scheduler/ax/streams"
)

// pubServer is a JetStream server with stream T on t.> (a minute's
// duplicate window) and a connection to it that reconnects for ever.
type pubServer struct {
	srv   *server.Server
	store string
	port  int
	nc    *nats.Conn
	js    jetstream.JetStream
}

func newPubServer(t *testing.T) *pubServer {
	t.Helper()
	ps := &pubServer{store: t.TempDir()}
	ps.start(t)
	t.Cleanup(func() { ps.srv.Shutdown(); ps.srv.WaitForShutdown() })
	nc, err := nats.Connect(ps.srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ps.nc = nc
	if ps.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"},
		Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	return ps
}

// start starts the server, on the port it had if it ran before.
func (ps *pubServer) start(t *testing.T) {
	t.Helper()
	srv, err := natsembed.Start(natsembed.Options{StoreDir: ps.store, Port: ps.port})
	if err != nil {
		t.Fatal(err)
	}
	ps.srv = srv
	ps.port = srv.Addr().(*net.TCPAddr).Port
}

func newPublisher(t *testing.T, nc *nats.Conn, opts streams.PublisherOptions) *streams.Publisher {
	t.Helper()
	p, err := streams.NewPublisher(nc, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func msg(subject, id string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = []byte("x")
	if id != "" {
		m.Header.Set(jetstream.MsgIDHeader, id)
	}
	return m
}

// TestPublisherAcknowledges gives each publish of a batch its own
// acknowledgement, a duplicate its stream's "duplicate".
func TestPublisherAcknowledges(t *testing.T) {
	t.Parallel()
	ps := newPubServer(t)
	p := newPublisher(t, ps.nc, streams.PublisherOptions{})
	b := p.Batch()
	const n = 500
	b.Grow(n) // room made before: each result still its own publish's
	for i := range n {
		b.Add(msg("t."+strconv.Itoa(i%7), strconv.Itoa(i)))
	}
	b.Add(msg("t.0", "0"))
	if err := b.Await(t.Context()); err != nil {
		t.Fatal(err)
	}
	seen := make(map[uint64]bool)
	for i := range n {
		ack, err := b.Result(i)
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if ack.Stream != "T" || ack.Duplicate || ack.Sequence < 1 || ack.Sequence > n || seen[ack.Sequence] {
			t.Fatalf("publish %d: acknowledgement %+v", i, ack)
		}
		seen[ack.Sequence] = true
	}
	if ack, err := b.Result(n); err != nil || !ack.Duplicate || ack.Sequence != 1 {
		t.Fatalf("the message id 0 again: %+v, %v; want a duplicate of sequence 1", ack, err)
	}
	b.Reset()
	b.Add(msg("t.x", "new"))
	if err := b.Wait(t.Context()); err != nil {
		t.Fatalf("a batch used again: %v", err)
	}
	if got := p.Pending(); got != 0 {
		t.Fatalf("%d publishes pending after every answer", got)
	}
}

// TestPublisherAddData publishes a message with its headers from the
// publisher's own map: each keeps its own, a message id dedupes and an
// expected sequence is checked.
func TestPublisherAddData(t *testing.T) {
	t.Parallel()
	ps := newPubServer(t)
	p := newPublisher(t, ps.nc, streams.PublisherOptions{})
	b := p.Batch()
	const n = 50
	for i := range n {
		b.AddData("t.data", []byte(strconv.Itoa(i)), streams.Header{Key: jetstream.MsgIDHeader, Value: "id-" + strconv.Itoa(i)},
			streams.Header{Key: "Ax-Test", Value: "v" + strconv.Itoa(i)})
	}
	b.AddData("t.data", []byte("again"), streams.Header{Key: jetstream.MsgIDHeader, Value: "id-0"})
	b.AddData("t.plain", []byte("no headers"))
	b.AddData("t.seq", []byte("x"), streams.Header{Key: jetstream.ExpectedLastSubjSeqHeader, Value: "7"})
	b.AddData("t.three", []byte("x"), streams.Header{Key: "A", Value: "1"}, streams.Header{Key: "B", Value: "2"},
		streams.Header{Key: "C", Value: "3"})
	if err := b.Await(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		ack, err := b.Result(i)
		if err != nil || ack.Duplicate {
			t.Fatalf("publish %d: %+v, %v", i, ack, err)
		}
		m, err := ps.js.Stream(t.Context(), "T")
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.GetMsg(t.Context(), ack.Sequence)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Data) != strconv.Itoa(i) || got.Header.Get(jetstream.MsgIDHeader) != "id-"+strconv.Itoa(i) ||
			got.Header.Get("Ax-Test") != "v"+strconv.Itoa(i) || len(got.Header) != 2 {
			t.Fatalf("publish %d stored as %q with headers %v", i, got.Data, got.Header)
		}
	}
	if ack, err := b.Result(n); err != nil || !ack.Duplicate {
		t.Fatalf("message id id-0 again: %+v, %v; want a duplicate", ack, err)
	}
	if _, err := b.Result(n + 1); err != nil {
		t.Fatalf("no headers: %v", err)
	}
	var apiErr *jetstream.APIError
	if _, err := b.Result(n + 2); !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("expected last sequence 7 of an empty subject: %v; want wrong last sequence", err)
	}
	if _, err := b.Result(n + 3); err != nil {
		t.Fatalf("three headers: %v", err)
	}
}

// TestPublisherCustomInboxPrefix takes its reply subjects under the
// connection's inbox prefix, which a user's permissions may limit it to.
func TestPublisherCustomInboxPrefix(t *testing.T) {
	t.Parallel()
	ps := newPubServer(t)
	nc, err := nats.Connect(ps.srv.ClientURL(), nats.CustomInboxPrefix("_AX_INBOX.w1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	quiet := silent(t, ps.nc, "quiet")
	p := newPublisher(t, nc, streams.PublisherOptions{})
	b := p.Batch()
	b.AddData("t.a", []byte("x"))
	if err := b.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	b.AddData("quiet", []byte("x"))
	if m := <-quiet; !strings.HasPrefix(m.Reply, "_AX_INBOX.w1.") || len(m.Reply) > 32 {
		t.Fatalf("reply subject %q: want one under _AX_INBOX.w1. of at most 32 bytes", m.Reply)
	}
	b.Reset()
}

// TestPublisherStreamErrors returns the stream's error answers as the
// jetstream client's *jetstream.APIError: a create-only KV write of a key
// that exists is refused with "wrong last sequence".
func TestPublisherStreamErrors(t *testing.T) {
	t.Parallel()
	ps := newPubServer(t)
	p := newPublisher(t, ps.nc, streams.PublisherOptions{})
	create := func() *nats.Msg {
		m := msg("t.lease", "")
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		return m
	}
	b := p.Batch()
	b.Add(create())
	if err := b.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	b.Add(create())
	if err := b.Await(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, err := b.Result(0)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence || apiErr.Code != 400 {
		t.Fatalf("second create-only write: %v; want the API error wrong last sequence", err)
	}
	b.Reset()
	b.Add(create())
	if err := b.Wait(t.Context()); err == nil || !errors.As(err, &apiErr) {
		t.Fatalf("Wait: %v; want the API error, joined", err)
	}
}

// TestPublisherNoStream answers a publish to a subject no stream takes
// with jetstream.ErrNoStreamResponse, after the jetstream client's tries.
func TestPublisherNoStream(t *testing.T) {
	t.Parallel()
	ps := newPubServer(t)
	p := newPublisher(t, ps.nc, streams.PublisherOptions{})
	b := p.Batch()
	b.Add(msg("nowhere", ""))
	if err := b.Await(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Result(0); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("publish to no stream: %v; want %v", err, jetstream.ErrNoStreamResponse)
	}
}

// silent takes the messages on subject at a core subscription that never
// answers, so that a publish stays pending.
func silent(t *testing.T, nc *nats.Conn, subject string) chan *nats.Msg {
	t.Helper()
	ch := make(chan *nats.Msg, 100)
	sub, err := nc.ChanSubscribe(subject, ch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ch
}

// TestPublisherTimeout answers a publish whose acknowledgement does not
// come with jetstream.ErrAsyncPublishTimeout after the timeout.
func TestPublisherTimeout(t *testing.T) {
	t.Parallel()
	ps := newPubServer(t)
	silent(t, ps.nc, "quiet")
	p := newPublisher(t, ps.nc, streams.PublisherOptions{Timeout: 300 * time.Millisecond})
	b := p.Batch()
	start := time.Now()
	b.Add(msg("quiet", ""))
	b.Add(msg("t.a", ""))
	if err := b.Await(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Result(0); !errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
		t.Fatalf("unanswered publish: %v; want %v", err, jetstream.ErrAsyncPublishTimeout)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("timed out after %v, before its timeout", took)
	}
	if _, err := b.Result(1); err != nil {
		t.Fatalf("the answered publish beside it: %v", err)
	}
}

// TestPublisherAwaitEnds stops waiting when ctx ends, and the answers
// that come later do not reach the batch used again.
func TestPublisherAwaitEnds(t *testing.T) {
	t.Parallel()
	ps := newPubServer(t)
	quiet := silent(t, ps.nc, "quiet")
	p := newPublisher(t, ps.nc, streams.PublisherOptions{Timeout: time.Minute})
	b := p.Batch()
	b.Add(msg("quiet", ""))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := b.Await(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Await with ctx ended: %v", err)
	}
	if _, err := b.Result(0); !errors.Is(err, context.Canceled) {
		t.Fatalf("the publish Await stopped waiting for: %v", err)
	}
	b.Reset()
	b.Add(msg("t.a", ""))
	if err := b.Await(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The late answer of the first publish is for no one.
	m := <-quiet
	if err := m.Respond([]byte(`{"error":{"code":400,"err_code":1,"description":"late"}}`)); err != nil {
		t.Fatal(err)
	}
	if err := wait.Until(t.Context(), func() (bool, error) { return p.Pending() == 0, nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Result(0); err != nil {
		t.Fatalf("the batch used again: %v", err)
	}
}

// TestPublisherBackPressure keeps at most MaxPending publishes pending: a
// publish beyond it waits for an answer.
func TestPublisherBackPressure(t *testing.T) {
	t.Parallel()
	ps := newPubServer(t)
	quiet := silent(t, ps.nc, "quiet")
	p := newPublisher(t, ps.nc, streams.PublisherOptions{MaxPending: 2, Timeout: time.Minute})
	b := p.Batch()
	added := make(chan struct{})
	go func() {
		defer close(added)
		for range 3 {
			b.Add(msg("quiet", ""))
		}
	}()
	first, second := <-quiet, <-quiet
	select {
	case m := <-quiet:
		t.Fatalf("a third publish %v went out with two pending and MaxPending 2", m)
	case <-time.After(200 * time.Millisecond):
	}
	if got := p.Pending(); got != 2 {
		t.Fatalf("%d pending, want 2", got)
	}
	ack := []byte(`{"stream":"Q","seq":1}`)
	if err := first.Respond(ack); err != nil {
		t.Fatal(err)
	}
	third := <-quiet
	<-added
	for _, m := range []*nats.Msg{second, third} {
		if err := m.Respond(ack); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestPublisherServerRestart answers the publishes pending when the server
// goes away with nats.ErrDisconnected at once, long before their timeout,
// and publishes again once the server is back.
func TestPublisherServerRestart(t *testing.T) {
	t.Parallel()
	ps := newPubServer(t)
	quiet := silent(t, ps.nc, "quiet")
	p := newPublisher(t, ps.nc, streams.PublisherOptions{Timeout: time.Hour})
	b := p.Batch()
	for range 10 {
		b.Add(msg("quiet", ""))
	}
	for range 10 {
		<-quiet
	}
	ps.srv.Shutdown()
	ps.srv.WaitForShutdown()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := b.Await(ctx); err != nil {
		t.Fatalf("pending publishes not answered after the server went away: %v", err)
	}
	for i := range 10 {
		if _, err := b.Result(i); !errors.Is(err, nats.ErrDisconnected) {
			t.Fatalf("publish %d: %v; want %v", i, err, nats.ErrDisconnected)
		}
	}
	b.Reset()
	ps.start(t)
	// A publish made while the connection is still away is buffered and
	// may be answered "disconnected" as well: try until one lands.
	for try := 0; ; try++ {
		b.Add(msg("t.back", "back"))
		err := b.Wait(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, nats.ErrDisconnected) && !errors.Is(err, jetstream.ErrNoStreamResponse) || ctx.Err() != nil {
			t.Fatalf("publish after the restart, try %d: %v", try, err)
		}
	}
}

// TestPublisherClose answers pending publishes with ErrPublisherClosed
// when the publisher closes, and nats.ErrConnectionClosed when its
// connection does.
func TestPublisherClose(t *testing.T) {
	t.Parallel()
	ps := newPubServer(t)
	quiet := silent(t, ps.nc, "quiet")
	for _, c := range []struct {
		name  string
		close func(p *streams.Publisher, nc *nats.Conn)
		want  error
	}{
		{"publisher", func(p *streams.Publisher, _ *nats.Conn) { p.Close() }, streams.ErrPublisherClosed},
		{"connection", func(_ *streams.Publisher, nc *nats.Conn) { nc.Close() }, nats.ErrConnectionClosed},
	} {
		t.Run(c.name, func(t *testing.T) {
			nc, err := nats.Connect(ps.srv.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			p := newPublisher(t, nc, streams.PublisherOptions{Timeout: time.Hour})
			b := p.Batch()
			b.Add(msg("quiet", ""))
			<-quiet
			c.close(p, nc)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			if err := b.Await(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Result(0); !errors.Is(err, c.want) {
				t.Fatalf("pending publish: %v; want %v", err, c.want)
			}
			b.Reset()
			b.Add(msg("t.a", ""))
			if err := b.Wait(t.Context()); err == nil {
				t.Fatal("a publish after the close succeeded")
			}
		})
	}
}

// BenchmarkPublisher compares a batch of 100 publishes, each with a
// message id, through the Publisher (AddData, and Add of a nats.Msg) with
// the jetstream client's PublishMsgAsync.
func BenchmarkPublisher(b *testing.B) {
	srv, err := natsembed.Start(natsembed.Options{StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"},
		Storage: jetstream.MemoryStorage, Duplicates: time.Minute}); err != nil {
		b.Fatal(err)
	}
	p, err := streams.NewPublisher(nc, streams.PublisherOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	subjects, ids := make([]string, 100), make([]string, 100)
	for i := range subjects {
		subjects[i], ids[i] = fmt.Sprintf("t.%d", i), strconv.Itoa(i)
	}
	data := []byte("x")
	add := func(batch *streams.AsyncBatch, i int) {
		m := nats.NewMsg(subjects[i])
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, ids[i])
		batch.Add(m)
	}
	for _, c := range []struct {
		name  string
		batch *streams.AsyncBatch
		add   func(batch *streams.AsyncBatch, i int)
	}{
		{"Publisher/AddData", p.Batch(), func(batch *streams.AsyncBatch, i int) {
			batch.AddData(subjects[i], data, streams.Header{Key: jetstream.MsgIDHeader, Value: ids[i]})
		}},
		{"Publisher/Add", p.Batch(), add},
		{"PublishMsgAsync/Add", streams.NewAsyncBatch(js), add},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for i := range subjects {
					c.add(c.batch, i)
				}
				if err := c.batch.Wait(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
