package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// TestReaperSendsTheRetryWhosePublishFailed has the reaper fail the
// attempt of a lapsed lease and lose the publish of its retry, as a
// stream without its leader does, after the guarded write committed: the
// instance is RETRYING, which no candidate list names again. The next step
// of the reaper must send the retry all the same — before the failure was
// kept, the instance stayed RETRYING for ever.
func TestReaperSendsTheRetryWhosePublishFailed(t *testing.T) {
	t.Parallel()
	b := newDeathBed(t, "A")
	ctx, d, id := t.Context(), b.d, b.id["A"]
	_, firings, reports := b.streams()
	lossy := &lossyPublishes{completer: d, lose: 1}
	d.reaper.next = lossy
	book := newLeaseBook()
	book.put([2]int64{id, 1}, "w1")
	r := &reaping{rp: d.reaper, reports: reports, holders: book, missing: make(vanishedLeases),
		retry: time.NewTimer(time.Hour), swept: true, promoted: true, recovered: true}
	t.Cleanup(func() { r.retry.Stop() })
	r.lost = []store.Failure{{InstanceID: id, Attempt: 1, Reason: leaseLost, At: time.Now()}}

	r.step(ctx)
	if lossy.lose != 0 {
		t.Fatal("the reaper published nothing; want its first publish lost")
	}
	if in, err := b.st.GetInstance(ctx, id); err != nil || in.State != schemas.StateRetrying {
		t.Fatalf("after the lost publish the instance is %v (%v); want RETRYING: the write commits first", in.State, err)
	}
	retries := d.top.AXTrigger("t")
	if _, err := firings.GetLastMsgForSubject(ctx, retries); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("%s holds a message after the lost publish (%v); want none", retries, err)
	}

	r.step(ctx)
	m, err := firings.GetLastMsgForSubject(ctx, retries)
	if err != nil {
		t.Fatalf("after the next step %s holds no retry: %v", retries, err)
	}
	var ev schemas.TriggerEvent
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		t.Fatal(err)
	}
	if want := schemas.RetryEventIDPrefix + strconv.FormatInt(id, 10) + "-2"; ev.EventID != want || ev.Retry == nil || ev.Retry.Attempt != 2 {
		t.Errorf("the retry sent is %s (retry of %+v); want %s, attempt 2", ev.EventID, ev.Retry, want)
	}
	if n := d.reaper.unsent.len(); n != 0 {
		t.Errorf("%d failures still kept after they were sent; want 0", n)
	}
	if book.known([2]int64{id, 1}) {
		t.Error("the lease book still holds the attempt after its failure was sent")
	}
}

// TestReaperKeepsNoFailureWhoseWriteFailed fails an attempt while
// PostgreSQL cannot be reached (the write is never sent): nothing changed,
// so nothing is kept to apply again — the caller names the attempt again.
// Before, every failed try was kept, and a reaper that tried through an
// outage kept one more each time, each applied again once it ended.
func TestReaperKeepsNoFailureWhoseWriteFailed(t *testing.T) {
	t.Parallel()
	b := newDeathBed(t, "A")
	ctx, d, id := t.Context(), b.d, b.id["A"]
	_, firings, reports := b.streams()
	lost := []store.Failure{{InstanceID: id, Attempt: 1, Reason: leaseLost, At: time.Now()}}
	down, cancel := context.WithCancel(ctx)
	cancel()
	for range 3 {
		if err := d.reaper.failAttempts(down, lost, nil, nil, nil, "lease expired"); err == nil {
			t.Fatal("failAttempts with PostgreSQL out of reach = nil; want its error")
		}
	}
	if n := d.reaper.unsent.len(); n != 0 {
		t.Fatalf("%d failures kept whose write failed; want 0", n)
	}
	if in, err := b.st.GetInstance(ctx, id); err != nil || in.State != schemas.StateDispatched {
		t.Fatalf("the instance is %v (%v); want DISPATCHED, as before the failed write", in.State, err)
	}

	r := &reaping{rp: d.reaper, reports: reports, holders: newLeaseBook(), missing: make(vanishedLeases),
		retry: time.NewTimer(time.Hour), swept: true, promoted: true, recovered: true}
	t.Cleanup(func() { r.retry.Stop() })
	r.lost = lost
	r.step(ctx)
	if in, err := b.st.GetInstance(ctx, id); err != nil || in.State != schemas.StateRetrying {
		t.Fatalf("after the caller's next try the instance is %v (%v); want RETRYING", in.State, err)
	}
	if _, err := firings.GetLastMsgForSubject(ctx, d.top.AXTrigger("t")); err != nil {
		t.Fatalf("after the caller's next try no retry was sent: %v", err)
	}
}

// TestReaperRecoversTheRetriesADeadDispatcherNeverSent leaves instances
// RETRYING as a reaper leaves them when its dispatcher dies between its
// write and the publish of the retry: L (a worker died; its reaper wrote a
// minute ago) and O (it outlived its timeout). Beside them, S's retry
// waits as a schedule, F moved to RETRYING by its worker's failed report,
// and Y was moved by a reaper moments ago (its retry may be on its way).
// A reaper's step sends the retries of L and O alone: L's at once (its
// first death), O's by the task's backoff, as a schedule.
func TestReaperRecoversTheRetriesADeadDispatcherNeverSent(t *testing.T) {
	t.Parallel()
	b := newDeathBed(t, "L", "O", "S", "F", "Y")
	ctx, d, st, id := t.Context(), b.d, b.st, b.id
	for name, reason := range map[string]string{"L": leaseLost, "O": timeoutPrefix + " the attempt outlived its timeout",
		"S": leaseLost, "F": "handler failed", "Y": leaseLost} {
		if _, err := st.FailAttempts(ctx, []store.Failure{{InstanceID: id[name], Attempt: 1, Reason: reason, At: time.Now()}}); err != nil {
			t.Fatal(err)
		}
	}
	// F's failure was its worker's report; all but Y's are a minute old.
	if _, err := st.Pool().Exec(ctx, `UPDATE instance_transitions SET operator = 'w1' WHERE instance_id = $1 AND to_state = 'RETRYING'`, id["F"]); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, `UPDATE instances SET updated_at = now() - interval '1 minute' WHERE id <> $1`, id["Y"]); err != nil {
		t.Fatal(err)
	}
	js, firings, reports := b.streams()
	sEvent := retryEventID(id["S"], 2)
	sched, err := streams.NewScheduleMsg(d.top.Sched(sEvent), d.top.AXTrigger("t"), streams.TriggerMsgID("t", sEvent), time.Now().Add(time.Hour),
		schemas.TriggerEvent{EventID: sEvent, Task: "t", Source: schemas.SourceRetry, Retry: &schemas.RetryOf{InstanceID: id["S"], Attempt: 2}})
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.PublishMsg(ctx, sched)
	if err != nil {
		t.Fatal(err)
	}
	r := &reaping{rp: d.reaper, reports: reports, holders: newLeaseBook(), missing: make(vanishedLeases),
		retry: time.NewTimer(time.Hour), swept: true, promoted: true}
	t.Cleanup(func() { r.retry.Stop() })

	r.step(ctx)
	if !r.recovered {
		t.Fatal("the step did not recover the lost retries")
	}
	sent := map[string]bool{}
	for name, n := range id {
		event := retryEventID(n, 2)
		m, err := firings.GetLastMsgForSubject(ctx, d.top.Sched(event))
		if err == nil && m.Sequence != ack.Sequence {
			sent[name+" (scheduled)"] = true
		}
	}
	info, err := firings.Info(ctx, jetstream.WithSubjectFilter(d.top.AXTrigger("t")))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[d.top.AXTrigger("t")]; n != 1 {
		t.Fatalf("%s holds %d firings; want 1, L's retry", d.top.AXTrigger("t"), n)
	}
	m, err := firings.GetLastMsgForSubject(ctx, d.top.AXTrigger("t"))
	if err != nil {
		t.Fatal(err)
	}
	var ev schemas.TriggerEvent
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		t.Fatal(err)
	}
	sent[ev.EventID] = true
	want := map[string]bool{retryEventID(id["L"], 2): true, "O (scheduled)": true}
	if len(sent) != len(want) || !sent[retryEventID(id["L"], 2)] || !sent["O (scheduled)"] {
		t.Errorf("retries sent: %v; want L's at once and O's scheduled (S's schedule kept as it was): %v", sent, want)
	}
}

// lossyPublishes is a completer that loses the next lose batches: their
// retries are never published and their publish fails.
type lossyPublishes struct {
	completer
	lose int
}

func (l *lossyPublishes) retryAfter(batch *streams.AsyncBatch, o store.Outcome, wait time.Duration, hold bool) error {
	if l.lose > 0 {
		return nil
	}
	return l.completer.retryAfter(batch, o, wait, hold)
}

func (l *lossyPublishes) publishAttempts(ctx context.Context, batch *streams.AsyncBatch, attempts []store.Attempt) error {
	if l.lose > 0 {
		l.lose--
		return errors.New("publish: nats: no response from stream")
	}
	return l.completer.publishAttempts(ctx, batch, attempts)
}

// streams readies the dispatcher's reaper to step, as Run does: a
// publisher, a JetStream context, writes that JetStream takes (no outage
// grace); it returns the JetStream context, AX_FIRINGS and AX_REPORTS.
func (b *deathBed) streams() (jetstream.JetStream, jetstream.Stream, jetstream.Stream) {
	t, ctx, d := b.t, b.t.Context(), b.d
	t.Helper()
	pub, err := streams.NewPublisher(d.opts.Conn, streams.PublisherOptions{Timeout: publishAckTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Close)
	d.pub = pub
	js, err := jetstream.New(d.opts.Conn)
	if err != nil {
		t.Fatal(err)
	}
	d.reaper.js = js
	d.reaper.writes.done(false, time.Now(), 0)
	firings, err := js.Stream(ctx, d.top.FiringsStream())
	if err != nil {
		t.Fatal(err)
	}
	reports, err := js.Stream(ctx, d.top.ReportsStream())
	if err != nil {
		t.Fatal(err)
	}
	return js, firings, reports
}
