package dispatcher

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-scheduler/ax/internal/wait"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// bulkTask takes payloads {"n": <integer>} of schema_version 2.
var bulkTask = &schemas.Task{TaskName: "bulk", Execution: schemas.Execution{Handler: "test.noop"}, SchemaVersion: 2,
	PayloadSchema: json.RawMessage(`{"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}`)}

// publish publishes data on task's trigger subject, with the Nats-Msg-Id
// header msgID unless it is empty, and returns its stream sequence.
func (b *batchRig) publish(task, msgID string, data []byte) uint64 {
	b.t.Helper()
	m := nats.NewMsg(b.srv.Topology.Trigger(task))
	m.Data = data
	if msgID != "" {
		m.Header.Set(nats.MsgIdHdr, msgID)
	}
	ack, err := b.js.PublishMsg(b.ctx, m)
	if err != nil {
		b.t.Fatal(err)
	}
	return ack.Sequence
}

// reason returns the reason of the last transition of the instance in.
func (b *batchRig) reason(in schemas.Instance) string {
	b.t.Helper()
	full, err := b.st.GetInstance(b.ctx, in.ID)
	if err != nil {
		b.t.Fatal(err)
	}
	if len(full.Transitions) == 0 {
		return ""
	}
	return full.Transitions[len(full.Transitions)-1].Reason
}

// TestBatchOfFirings publishes a batch whose good firings sit between bad
// ones: every good firing is one DISPATCHED instance under its event id
// (its own, idem-<key>, or derived from the message and its index), every
// bad one a SKIPPED instance of its own that says what a single firing so
// bad says, and the message is acknowledged.
func TestBatchOfFirings(t *testing.T) {
	t.Parallel()
	b := newBatchRig(t, bulkTask)
	b.start()

	seq := b.publish("bulk", "", []byte(`[
		{"event_id": "good-0", "payload": {"n": 0}, "payload_version": 2},
		{"event_id": "old", "payload": {"n": 1}},
		{"idempotency_key": "k", "payload": {"n": 2}, "payload_version": 2},
		{"event_id": "bad-payload", "payload": {"n": "two"}, "payload_version": 2},
		{"payload": {"n": 4}, "payload_version": 2},
		{"event_id": "x", "nope": 1},
		{"event_id": "other", "task": "another", "payload": {"n": 6}, "payload_version": 2},
		{"event_id": "retry-1-2", "payload": {"n": 7}, "payload_version": 2},
		7,
		{"event_id": "good-9", "payload": {"n": 9}, "payload_version": 2}
	]`))
	byHeader := b.publish("bulk", "bulk/order-42", []byte(`[{"payload": {"n": 0}, "payload_version": 2}, {"payload": {"n": 1}, "payload_version": 2}]`))
	at := func(i int) string { return fmt.Sprintf("seq-%d-%d", seq, i) }
	for _, tc := range []struct {
		event, state, reason string
	}{
		{"good-0", "DISPATCHED", ""},
		{"old", "SKIPPED", "payload_version 1 does not match the task's schema_version 2"},
		{"idem-k", "DISPATCHED", ""},
		{"bad-payload", "SKIPPED", "invalid payload: payload.n: "},
		{at(4), "DISPATCHED", ""},
		{at(5), "SKIPPED", `malformed trigger event: invalid trigger event: unknown field "nope"`},
		{at(6), "SKIPPED", `trigger event names task "another" but was published to`},
		{at(7), "SKIPPED", "reserved id: event_id: \"retry-1-2\" is in AX's own namespace"},
		{at(8), "SKIPPED", "malformed trigger event: invalid trigger event"},
		{"good-9", "DISPATCHED", ""},
		{"order-42/0", "DISPATCHED", ""},
		{"order-42/1", "DISPATCHED", ""},
	} {
		in := b.instance("bulk", tc.event, "the firing "+tc.event+" of the batch")
		if string(in.State) != tc.state || !strings.Contains(b.reason(in), tc.reason) {
			t.Errorf("firing %s: %s %q, want %s %q", tc.event, in.State, b.reason(in), tc.state, tc.reason)
		}
	}
	b.consumer(0, "the batches were not acknowledged")
	if byHeader != seq+1 {
		t.Fatalf("stream sequences %d, %d", seq, byHeader)
	}
	if got := b.dispatched(); len(got) != 6 {
		t.Errorf("%d dispatch messages, want one for each of the 6 good firings", len(got))
	}
}

// TestBatchRefusedWhole: a batch of more than schemas.MaxTriggerBatch
// firings, or one that is not valid JSON, is refused whole: one SKIPPED
// instance for the message that names the limit (or the syntax error),
// and none of its firings.
func TestBatchRefusedWhole(t *testing.T) {
	t.Parallel()
	b := newBatchRig(t, bulkTask)
	b.start()

	evs := make([]schemas.TriggerEvent, schemas.MaxTriggerBatch+1)
	for i := range evs {
		evs[i] = schemas.TriggerEvent{EventID: fmt.Sprintf("e%d", i), Payload: json.RawMessage(`{"n":1}`), PayloadVersion: 2}
	}
	big, err := schemas.MarshalTriggerBatch(evs)
	if err != nil {
		t.Fatal(err)
	}
	bigSeq := b.publish("bulk", "", big)
	badSeq := b.publish("bulk", "", []byte(`[{"event_id": "a"}, {"event_id": "b"},]`))
	in := b.instance("bulk", fmt.Sprintf("seq-%d", bigSeq), "the batch over the limit")
	if in.State != schemas.StateSkipped || !strings.Contains(b.reason(in),
		"refused batch of firings: invalid batch of firings: holds 1001 firings; a batch holds at most 1000 (schemas.MaxTriggerBatch)") {
		t.Errorf("the batch over the limit: %s %q", in.State, b.reason(in))
	}
	in = b.instance("bulk", fmt.Sprintf("seq-%d", badSeq), "the batch that is not JSON")
	if in.State != schemas.StateSkipped || !strings.Contains(b.reason(in), "refused batch of firings: invalid batch of firings: is not valid JSON") {
		t.Errorf("the batch that is not JSON: %s %q", in.State, b.reason(in))
	}
	b.consumer(0, "the refused batches were not acknowledged")
	for _, id := range []string{"e0", "e1000", "a"} {
		if _, err := b.st.InstanceByEvent(b.ctx, "bulk", id); err == nil {
			t.Errorf("the firing %s of a refused batch made an instance", id)
		}
	}
}

// TestBatchAcknowledgedOnceEveryFiringIsMade publishes a batch with a
// firing due now and one due in 1.5 s, which the dispatcher holds: the
// message stays unacknowledged after the first's instance is made, until
// the held one's is.
func TestBatchAcknowledgedOnceEveryFiringIsMade(t *testing.T) {
	t.Parallel()
	b := newBatchRig(t, bulkTask)
	b.start()

	seq := b.publish("bulk", "", []byte(`[{"event_id": "now", "payload": {"n": 1}, "payload_version": 2},
		{"event_id": "soon", "delay": "1500ms", "payload": {"n": 2}, "payload_version": 2}]`))
	b.instance("bulk", "now", "the firing due now")
	info := b.consumer(1, "the batch taken")
	if _, err := b.st.InstanceByEvent(b.ctx, "bulk", "soon"); err != nil && info.AckFloor.Stream >= seq {
		t.Errorf("the batch was acknowledged (ack floor %d, its sequence %d) while its held firing has no instance yet", info.AckFloor.Stream, seq)
	}
	b.instance("bulk", "soon", "the held firing")
	b.consumer(0, "the batch was not acknowledged once its held firing was made")
}

// TestHeaderEventIDFollowsTheEventIDRules: an event id taken from a
// Nats-Msg-Id header keeps the rules of a body's event_id (issue 24, hole
// 10: a 4,096-character id and "a b" were stored). Each such firing is a
// SKIPPED instance under its stream sequence that says why; a good header
// id still names its instance.
func TestHeaderEventIDFollowsTheEventIDRules(t *testing.T) {
	t.Parallel()
	b := newBatchRig(t, bulkTask)
	b.start()
	body := []byte(`{"payload": {"n": 1}, "payload_version": 2}`)
	long := b.publish("bulk", "bulk/"+strings.Repeat("a", 4096), body)
	spaced := b.publish("bulk", "bulk/a b", body)
	b.publish("bulk", "bulk/order-7", body)
	for _, tc := range []struct {
		seq    uint64
		reason string
	}{
		{long, "the Nats-Msg-Id header cannot be the event id: it has 4096 characters, more than 200"},
		{spaced, "the Nats-Msg-Id header cannot be the event id: it must not contain spaces"},
	} {
		in := b.instance("bulk", fmt.Sprintf("seq-%d", tc.seq), "the firing with a bad header id")
		if in.State != schemas.StateSkipped || !strings.Contains(b.reason(in), tc.reason) {
			t.Errorf("firing %d: %s %q, want SKIPPED %q", tc.seq, in.State, b.reason(in), tc.reason)
		}
	}
	if in := b.instance("bulk", "order-7", "the firing with a good header id"); in.State != schemas.StateDispatched {
		t.Errorf("the firing with a good header id: %s", in.State)
	}
	for _, id := range []string{strings.Repeat("a", 4096), "a b"} {
		if _, err := b.st.InstanceByEvent(b.ctx, "bulk", id); err == nil {
			t.Errorf("an instance was stored under the header id %.20q", id)
		}
	}
}

// TestFiringTooLargeToDispatchEnds: a firing published straight to NATS
// whose payload fits AX_TRIGGERS but not a dispatch message (8 MiB − 100
// B under the server's 8 MiB max_payload) ends SKIPPED with a reason that
// names the limit, and the firing published with it goes on (issue 24,
// hole 10: it stayed DISPATCHED for ever, its batch failing each 2 s).
func TestFiringTooLargeToDispatchEnds(t *testing.T) {
	t.Parallel()
	task := &schemas.Task{TaskName: "big", Execution: schemas.Execution{Handler: "test.noop"}}
	b := newBatchRig(t, task)
	max := int(b.d.opts.Conn.MaxPayload())
	prefix := `{"event_id": "huge", "payload": {"s": "`
	suffix := `"}}`
	huge := prefix + strings.Repeat("a", max-100-len(prefix)-len(suffix)) + suffix
	seq := b.publish("big", "", []byte(huge))
	b.publish("big", "", []byte(`{"event_id": "small", "payload": {"s": "a"}}`))
	b.start()
	// A refused firing is recorded under its stream sequence.
	in := b.instance("big", fmt.Sprintf("seq-%d", seq), "the firing too large to dispatch")
	if want := fmt.Sprintf("NATS max_payload of %d bytes", max); in.State != schemas.StateSkipped || !strings.Contains(b.reason(in), want) {
		t.Errorf("the firing too large to dispatch: %s %q, want SKIPPED naming %q", in.State, b.reason(in), want)
	}
	if in := b.instance("big", "small", "the firing beside it"); in.State != schemas.StateDispatched {
		t.Errorf("the firing beside it: %s", in.State)
	}
	b.consumer(0, "the firings were not acknowledged")
	if got := b.dispatched(); len(got) != 1 {
		t.Errorf("%d dispatch messages, want the small firing's only", len(got))
	}
}

// TestAttemptTooLargeToDispatchFails: an instance made before the intake
// refused such payloads (an older dispatcher's, or one on a server with a
// larger max_payload) whose dispatch message cannot be published fails for
// good with a reason naming the limit, once its firing comes again, and
// the firing beside it goes on (issue 24, hole 10: "maximum payload
// exceeded" every 2 s for ever, again after a restart).
func TestAttemptTooLargeToDispatchFails(t *testing.T) {
	t.Parallel()
	task := &schemas.Task{TaskName: "big", Execution: schemas.Execution{Handler: "test.noop"}}
	b := newBatchRig(t, task)
	max := int(b.d.opts.Conn.MaxPayload())
	payload := `{"s": "` + strings.Repeat("a", max-100) + `"}`
	if _, err := b.st.CreateInstances(b.ctx, []store.NewInstance{{Task: "big", TaskVersion: 1, EventID: "huge",
		Source: schemas.SourceEvent, Priority: schemas.PriorityNormal, Pool: schemas.DefaultPool, Handler: "test.noop",
		TimeoutMS: 60_000, MaxAttempts: 3, Payload: json.RawMessage(payload), FiredAt: time.Now(), State: schemas.StateDispatched}}); err != nil {
		t.Fatal(err)
	}
	b.fire("big", "huge") // redelivered: the instance is published again
	b.fire("big", "small")
	b.start()
	var in schemas.Instance
	if err := wait.Until(b.ctx, func() (bool, error) {
		var err error
		in, err = b.st.InstanceByEvent(b.ctx, "big", "huge")
		return err == nil && in.State != schemas.StateDispatched, err
	}); err != nil {
		t.Fatalf("the attempt too large to dispatch stayed %s: %v", in.State, err)
	}
	if want := "over the"; in.State != schemas.StateFailed || !strings.Contains(b.reason(in), "NATS max_payload") || !strings.Contains(b.reason(in), want) {
		t.Errorf("the attempt too large to dispatch: %s %q, want FAILED naming the NATS max_payload", in.State, b.reason(in))
	}
	if in := b.instance("big", "small", "the firing beside it"); in.State != schemas.StateDispatched {
		t.Errorf("the firing beside it: %s", in.State)
	}
	b.consumer(0, "the firings were not acknowledged")
}
