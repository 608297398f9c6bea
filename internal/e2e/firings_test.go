package e2e_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/devstack"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
	"github.com/ax-scheduler/ax/trigger"
	"github.com/ax-scheduler/ax/trigger/triggertest"
)

// The tests of this file act as the trigger's NATS user, the one `ax dev`
// hands to outside publishers, against the headers JetStream acts on and
// the firings only AX's own services may make (issue 24, holes 3–6).

// triggerJS connects as the trigger's user.
func (a *authSystem) triggerJS() (*nats.Conn, jetstream.JetStream) {
	a.t.Helper()
	nc := a.connect(string(natsauth.Trigger))
	js, err := jetstream.New(nc)
	if err != nil {
		a.t.Fatal(err)
	}
	return nc, js
}

// streamMsgs returns how many messages each stream of the topology that
// holds firings holds (AX_FIRINGS only where it exists), read as the
// dispatcher.
func (a *authSystem) streamMsgs() map[string]uint64 {
	a.t.Helper()
	js := a.dispatcherJS()
	out := map[string]uint64{}
	for _, name := range []string{a.top.TriggersStream(), "AX_FIRINGS"} {
		st, err := js.Stream(context.Background(), name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			a.t.Fatal(err)
		}
		info, err := st.Info(context.Background())
		if err != nil {
			a.t.Fatal(err)
		}
		out[name] = info.State.Msgs
	}
	return out
}

// operatorOf returns the operator of the CREATED transition of the
// instance of task's firing eventID.
func operatorOf(in schemas.Instance) string {
	if len(in.Transitions) == 0 {
		return ""
	}
	return in.Transitions[0].Operator
}

// TestScheduledCopyIsNotTheAPIs sends, as the trigger's user, message
// schedules aimed at the API's subjects: a firing that names an operator,
// and an order to cancel another task's instance. The server refuses each
// (the stream outside publishers write holds no schedules), AX_TRIGGERS
// holds nothing new, and no firing comes of them: the victim stays
// DISPATCHED and no instance is recorded as the spoofed operator's.
func TestScheduledCopyIsNotTheAPIs(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	ctx := context.Background()
	a.apply("task_name: victim\nexecution: {handler: builtin.echo}\n")
	victim := a.fire("victim", nil)
	a.waitState(victim, schemas.StateDispatched, time.Minute)
	_, js := a.triggerJS()
	before := a.streamMsgs()

	bodies := map[string]string{
		"spoofed firing": `{"event_id":"sched-spoof","source":"manual","operator":"spoofed-admin"}`,
		"spoofed cancel": `{"event_id":"sched-cancel","source":"manual","operator":"spoofed-admin","cancel":{"instance_id":` +
			strconv.FormatInt(victim, 10) + `,"reason":"forged"}}`,
	}
	for what, body := range bodies {
		for _, target := range []string{a.top.APITrigger("victim"), a.top.Trigger("victim") + ".api"} {
			m := nats.NewMsg(a.top.Trigger("zz"))
			m.Data = []byte(body)
			m.Header.Set(streams.HeaderSchedule, "@at "+time.Now().UTC().Format(time.RFC3339Nano))
			m.Header.Set(streams.HeaderScheduleTarget, target)
			if _, err := js.PublishMsg(ctx, m); err == nil {
				t.Errorf("a %s scheduled onto %s was stored", what, target)
			}
		}
	}
	if after := a.streamMsgs(); after[a.top.TriggersStream()] != before[a.top.TriggersStream()] {
		t.Errorf("%s went from %d to %d messages: a schedule was stored", a.top.TriggersStream(),
			before[a.top.TriggersStream()], after[a.top.TriggersStream()])
	}

	// A firing published after them is made; nothing of theirs is.
	if _, err := streams.Publish(ctx, js, a.top.Trigger("victim"), "", schemas.TriggerEvent{EventID: "canary"}); err != nil {
		t.Fatal(err)
	}
	a.instanceOf("victim", "canary")
	for _, id := range []string{"sched-spoof", "sched-cancel"} {
		if in, err := a.store.InstanceByEvent(ctx, "victim", id); err == nil {
			t.Errorf("the scheduled copy %s made instance %d", id, in.ID)
		}
	}
	var n int
	if err := a.pool.QueryRow(ctx, `SELECT count(*) FROM instance_transition_log WHERE operator = 'spoofed-admin'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d transitions recorded as spoofed-admin's (%v)", n, err)
	}
	if in, err := a.store.GetInstance(ctx, victim); err != nil || in.State != schemas.StateDispatched {
		t.Errorf("victim %d is %s (%v), want DISPATCHED", victim, in.State, err)
	}
}

// TestRollupsAreRefused purges, as the trigger's user, the stream it
// writes with Nats-Rollup and a pending delayed firing of the API with a
// scheduled Nats-Schedule-Rollup. The server refuses both; no stream lost
// a message, and both delayed firings make their instances when due.
func TestRollupsAreRefused(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	ctx := context.Background()
	a.apply("task_name: victim\nexecution: {handler: builtin.echo}\n")
	_, js := a.triggerJS()
	for _, id := range []string{"e1", "e2", "e3"} {
		if _, err := streams.Publish(ctx, js, a.top.Trigger("victim"), "", schemas.TriggerEvent{EventID: id}); err != nil {
			t.Fatal(err)
		}
		a.instanceOf("victim", id)
	}
	for _, id := range []string{"delayed-v3", "delayed-v4"} {
		if _, err := a.client.Fire(ctx, "victim", wire.FireRequest{EventID: id, Delay: "6s"}); err != nil {
			t.Fatal(err)
		}
	}
	before := a.streamMsgs()

	purge := nats.NewMsg(a.top.Trigger("zz4"))
	purge.Header.Set("Nats-Rollup", "all")
	if _, err := js.PublishMsg(ctx, purge); err == nil {
		t.Error("a Nats-Rollup: all was stored")
	}
	sub := nats.NewMsg(a.top.Trigger("victim"))
	sub.Header.Set("Nats-Rollup", "sub")
	if _, err := js.PublishMsg(ctx, sub); err == nil {
		t.Error("a Nats-Rollup: sub was stored")
	}
	aimed := nats.NewMsg(a.top.Trigger("zz5"))
	aimed.Header.Set(streams.HeaderSchedule, "@at "+time.Now().UTC().Format(time.RFC3339Nano))
	aimed.Header.Set(streams.HeaderScheduleTarget, a.top.SchedFiring("victim", "delayed-v3"))
	aimed.Header.Set("Nats-Schedule-Rollup", "sub")
	if _, err := js.PublishMsg(ctx, aimed); err == nil {
		t.Error("a schedule with Nats-Schedule-Rollup was stored")
	}
	after := a.streamMsgs()
	if after[a.top.TriggersStream()] != before[a.top.TriggersStream()] {
		t.Errorf("%s went from %d to %d messages", a.top.TriggersStream(), before[a.top.TriggersStream()], after[a.top.TriggersStream()])
	}
	for name, n := range before {
		if after[name] < n {
			t.Errorf("%s went from %d to %d messages", name, n, after[name])
		}
	}
	for _, id := range []string{"delayed-v3", "delayed-v4"} {
		if in := a.instanceOf("victim", id); in.Source != schemas.SourceEvent && in.Source != schemas.SourceManual {
			t.Errorf("delayed firing %s: source %s", id, in.Source)
		}
	}
}

// TestForgedChainFiring publishes, as the trigger's user, the chain firing
// of a child in a run with a made-up parent output, before the parent
// runs. It is refused as a SKIPPED instance under its stream sequence that
// says why; the parent then runs in that run, and the true chain firing
// makes the child with the true parent and output.
func TestForgedChainFiring(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	ctx := context.Background()
	a.apply(chainDef("cparent", "builtin.echo"))
	a.apply(chainDef("cchild", "builtin.echo", "cparent"))
	a.executor(string(natsauth.Executor), defaultWorker, schemas.DefaultPool)
	_, js := a.triggerJS()

	const run = "r-forged"
	forged := schemas.TriggerEvent{EventID: schemas.ChainEventID("cchild", run), Source: schemas.SourceChain, RunID: run,
		Parents: map[string]schemas.ParentResult{"cparent": {InstanceID: 1, State: schemas.StateSucceeded, Output: json.RawMessage(`{"forged":true}`)}}}
	if _, err := streams.Publish(ctx, js, a.top.Trigger("cchild"), "", forged); err != nil {
		t.Fatal(err)
	}
	var reason string
	waitFor(t, "the forged chain firing to be refused", time.Minute, func() (bool, error) {
		err := a.pool.QueryRow(ctx, `SELECT t.reason FROM instances i JOIN instance_transition_log t ON t.instance_id = i.id
			WHERE i.task = 'cchild' AND i.state = 'SKIPPED' AND t.reason <> '' LIMIT 1`).Scan(&reason)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	})
	if !strings.Contains(reason, "chain firing") {
		t.Errorf("the refusal says %q", reason)
	}

	res, err := a.client.Fire(ctx, "cparent", wire.FireRequest{RunID: run, Payload: json.RawMessage(`{"truth":"real"}`)})
	if err != nil {
		t.Fatal(err)
	}
	child := a.chained("cchild", run, schemas.StateSucceeded, time.Minute)
	p, ok := child.Parents["cparent"]
	if !ok || p.InstanceID != res.InstanceID || p.State != schemas.StateSucceeded || !strings.Contains(string(p.Output), "real") {
		t.Errorf("the child ran after %+v, want parent %d SUCCEEDED with the true output", child.Parents, res.InstanceID)
	}
	if child.Source != schemas.SourceChain {
		t.Errorf("the child's source is %s", child.Source)
	}
}

// TestPreemptiveMsgIDs publishes, as the trigger's user, firings whose
// Nats-Msg-Id is the one the API's later firings of another task carry:
// on a subject of no task, and on the task's own with another event id.
// The API's firings still make their instances, as its token's holder's.
func TestPreemptiveMsgIDs(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	ctx := context.Background()
	a.apply("task_name: victim\nexecution: {handler: builtin.echo}\n")
	_, js := a.triggerJS()
	for _, pre := range []struct{ subject, msgID, body string }{
		{a.top.Trigger("zz"), streams.TriggerMsgID("victim", "pre-1"), `{}`},
		{a.top.Trigger("zz"), streams.TriggerMsgID("victim", schemas.IdempotencyEventIDPrefix+"k1"), `{}`},
		{a.top.Trigger("victim"), streams.TriggerMsgID("victim", "pre-2"), `{"event_id":"other-2"}`},
	} {
		m := nats.NewMsg(pre.subject)
		m.Data = []byte(pre.body)
		m.Header.Set(streams.HeaderMsgID, pre.msgID)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	a.instanceOf("victim", "other-2")

	for _, req := range []wire.FireRequest{{EventID: "pre-1"}, {IdempotencyKey: "k1"}, {EventID: "pre-2"}} {
		res, err := a.client.Fire(ctx, "victim", req)
		if err != nil {
			t.Fatal(err)
		}
		in := a.instanceOf("victim", res.EventID)
		if op := operatorOf(in); op == "" || op == store.OperatorNATS {
			t.Errorf("the API's firing %s is recorded as %q's", res.EventID, op)
		}
	}
}

// TestPreemptedCronMsgID publishes, as the trigger's user, firings on
// another subject of AX_TRIGGERS whose Nats-Msg-Id is a cron tick's event
// id, plain and scoped by the task, before the trigger service (under its
// own user) fires that tick. The tick's firing carries an id keyed with
// the store's secret, which no outside publisher can compute: JetStream
// does not drop it as their duplicate, and the tick makes its instance.
func TestPreemptedCronMsgID(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	ctx := context.Background()
	a.apply("task_name: minutely\nexecution: {handler: builtin.echo}\ntriggers:\n  - type: cron\n    schedule: \"0 * * * * *\"\n")
	tick := time.Date(2024, 5, 1, 10, 1, 0, 0, time.UTC)
	id := schemas.CronEventID("minutely", 0, tick)
	_, js := a.triggerJS()
	for _, msgID := range []string{id, streams.TriggerMsgID("minutely", id)} {
		m := nats.NewMsg(a.top.Trigger("zz"))
		m.Data = []byte(`{}`)
		m.Header.Set(streams.HeaderMsgID, msgID)
		ack, err := js.PublishMsg(ctx, m)
		if err != nil || ack.Duplicate {
			t.Fatalf("pre-emptive publish of %s: %+v, %v", msgID, ack, err)
		}
	}

	clock := triggertest.NewClock(tick.Add(-30 * time.Second))
	a.startStack(devstack.Options{NATSURL: a.ns.ClientURL(), Passwords: a.passwords,
		Services: []natsauth.Role{natsauth.Trigger}, Trigger: trigger.Options{Clock: clock}})
	if got := clock.Step(t, 1); !got.Equal(tick) {
		t.Fatalf("the trigger woke at %v, want %v", got, tick)
	}
	if in := a.instanceOf("minutely", id); in.Source != schemas.SourceCron || !in.FiredAt.Equal(tick) {
		t.Errorf("the tick made %s fired at %v, want cron at %v", in.Source, in.FiredAt, tick)
	}
}

// TestSignedCronFiringOutlivesItsTrigger publishes a task's cron firing
// as the trigger service does (its user, the Nats-Msg-Id keyed with the
// store's secret) after the task's cron trigger was removed: the tick
// was fired while the trigger stood, and the dispatcher read the new
// definition first. It makes its instance. The same firing of another
// tick under an id of the right shape but no key is checked against the
// definition and refused under its stream sequence.
func TestSignedCronFiringOutlivesItsTrigger(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	ctx := context.Background()
	a.apply("task_name: dropped\nexecution: {handler: builtin.echo}\ntriggers:\n  - type: cron\n    schedule: \"0 0 1 1 *\"\n")
	a.apply("task_name: dropped\nexecution: {handler: builtin.echo}\n")
	key, err := a.store.CronMsgIDKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, js := a.triggerJS()
	signed := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	unsigned := signed.AddDate(1, 0, 0)
	for _, tc := range []struct {
		at    time.Time
		msgID string
	}{
		{signed, streams.CronMsgID(hmac.New(sha256.New, key), "dropped", schemas.CronEventID("dropped", 0, signed))},
		{unsigned, "dropped/" + strings.Repeat("0", streams.CronMsgIDLen)},
	} {
		ev := schemas.TriggerEvent{EventID: schemas.CronEventID("dropped", 0, tc.at), Task: "dropped", Source: schemas.SourceCron, FiredAt: tc.at}
		if _, err := streams.Publish(ctx, js, a.top.Trigger("dropped"), tc.msgID, ev); err != nil {
			t.Fatal(err)
		}
	}
	if in := a.instanceOf("dropped", schemas.CronEventID("dropped", 0, signed)); in.Source != schemas.SourceCron || in.State == schemas.StateSkipped {
		t.Errorf("the signed tick made a %s instance, %s; want cron, not skipped", in.Source, in.State)
	}
	var reason string
	waitFor(t, "the unsigned tick to be refused", time.Minute, func() (bool, error) {
		err := a.pool.QueryRow(ctx, `SELECT t.reason FROM instances i JOIN instance_transition_log t ON t.instance_id = i.id
			WHERE i.task = 'dropped' AND i.state = 'SKIPPED' AND i.event_id LIKE 'seq-%' AND t.reason <> '' LIMIT 1`).Scan(&reason)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	})
	if !strings.Contains(reason, "no cron trigger") {
		t.Errorf("the refusal says %q", reason)
	}
}

// TestForgedCronFirings publishes, as the trigger's user (whose user the
// trigger service's cron ticks share), cron firings of a tick off the
// task's schedule, of one not yet due, and of a due tick with a payload.
// The first two are SKIPPED under their stream sequences, saying why;
// the due tick makes the instance the trigger service would, without the
// payload.
func TestForgedCronFirings(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	ctx := context.Background()
	a.apply("task_name: yearly\nexecution: {handler: builtin.echo}\ntriggers:\n  - type: cron\n    schedule: \"0 0 1 1 *\"\n")
	_, js := a.triggerJS()
	tick := func(y int, sec int) time.Time { return time.Date(y, 1, 1, 0, 0, sec, 0, time.UTC) }
	for _, at := range []time.Time{tick(2024, 1), tick(time.Now().Year()+2, 0)} {
		ev := schemas.TriggerEvent{EventID: schemas.CronEventID("yearly", 0, at), Source: schemas.SourceCron, FiredAt: at}
		if _, err := streams.Publish(ctx, js, a.top.Trigger("yearly"), "", ev); err != nil {
			t.Fatal(err)
		}
	}
	due := schemas.TriggerEvent{EventID: schemas.CronEventID("yearly", 0, tick(2024, 0)), Source: schemas.SourceCron,
		FiredAt: tick(2024, 0), Payload: json.RawMessage(`{"forged":true}`)}
	if _, err := streams.Publish(ctx, js, a.top.Trigger("yearly"), "", due); err != nil {
		t.Fatal(err)
	}
	in := a.instanceOf("yearly", due.EventID)
	if in.Source != schemas.SourceCron || len(in.Payload) > 0 && string(in.Payload) != "null" {
		t.Errorf("the due tick made %s with payload %s, want cron without one", in.Source, in.Payload)
	}
	for _, at := range []time.Time{tick(2024, 1), tick(time.Now().Year()+2, 0)} {
		if got, err := a.store.InstanceByEvent(ctx, "yearly", schemas.CronEventID("yearly", 0, at)); err == nil {
			t.Errorf("the forged tick %v made instance %d under its id", at, got.ID)
		}
	}
	var reasons []string
	waitFor(t, "both forged ticks to be refused", time.Minute, func() (bool, error) {
		rows, err := a.pool.Query(ctx, `SELECT t.reason FROM instances i JOIN instance_transition_log t ON t.instance_id = i.id
			WHERE i.task = 'yearly' AND i.state = 'SKIPPED' AND i.event_id LIKE 'seq-%' AND t.reason <> '' ORDER BY i.id`)
		if err != nil {
			return false, err
		}
		reasons, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return len(reasons) == 2, err
	})
	// The two may be taken in either order (one batch or two).
	slices.Sort(reasons)
	if !strings.Contains(reasons[0], "no tick of trigger 0") || !strings.Contains(reasons[1], "not due yet") {
		t.Errorf("the refusals say %q", reasons)
	}
}

// TestAPIScheduleMakesNoAXFiring writes, as the api's NATS user, the
// schedule of a delayed firing aimed at the dispatcher's own subject with
// a chain firing in it: the api may write such schedules, and their copies
// land where AX's own kinds are taken. The copy is SKIPPED under its
// stream sequence, saying why; the chain id stays free.
func TestAPIScheduleMakesNoAXFiring(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	ctx := context.Background()
	a.apply(chainDef("cparent", "builtin.echo"))
	a.apply(chainDef("cchild", "builtin.echo", "cparent"))
	js, err := jetstream.New(a.connect(string(natsauth.API)))
	if err != nil {
		t.Fatal(err)
	}
	forged := schemas.TriggerEvent{EventID: schemas.ChainEventID("cchild", "r-api"), Source: schemas.SourceChain, RunID: "r-api",
		Parents: map[string]schemas.ParentResult{"cparent": {InstanceID: 1, State: schemas.StateSucceeded, Output: json.RawMessage(`{"forged":true}`)}}}
	m, err := streams.NewScheduleMsg(a.top.SchedFiring("cchild", "later"), a.top.AXTrigger("cchild"), "", time.Now(), forged)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	var reason string
	waitFor(t, "the scheduled chain firing to be refused", time.Minute, func() (bool, error) {
		err := a.pool.QueryRow(ctx, `SELECT t.reason FROM instances i JOIN instance_transition_log t ON t.instance_id = i.id
			WHERE i.task = 'cchild' AND i.state = 'SKIPPED' AND i.event_id LIKE 'seq-%' AND t.reason <> '' LIMIT 1`).Scan(&reason)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	})
	if !strings.Contains(reason, "never from the schedule of a delayed firing") {
		t.Errorf("the refusal says %q", reason)
	}
	if in, err := a.store.InstanceByEvent(ctx, "cchild", forged.EventID); err == nil {
		t.Errorf("the scheduled chain firing made instance %d under its id", in.ID)
	}
}
