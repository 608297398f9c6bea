package e2e_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// TestSpoofedOperator publishes, as the trigger's NATS user (the one that
// may publish firings besides the api), a firing that says it is Alice's
// manual run and an order to cancel an instance. The firing is recorded as
// an event of operator "nats", the cancel order is refused, and the API's
// subjects, the only ones whose firings may name an operator, are closed
// to it. The API's own firing still names its token's holder.
func TestSpoofedOperator(t *testing.T) {
	t.Parallel()
	a := newAuthSystem(t)
	ctx := context.Background()
	a.apply(`
task_name: payroll
execution:
  handler: builtin.echo
`)
	nc, v := a.watch(string(natsauth.Trigger))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	spoof := schemas.TriggerEvent{EventID: "spoof-1", Source: schemas.SourceManual, Operator: "alice-the-admin"}
	if _, err := streams.Publish(ctx, js, a.top.Trigger("payroll"), "", spoof); err != nil {
		t.Fatal(err)
	}
	in := a.instanceOf("payroll", "spoof-1")
	if in.Source != schemas.SourceEvent {
		t.Errorf("source = %s, want event", in.Source)
	}
	for _, tr := range in.Transitions {
		if tr.Operator == "alice-the-admin" {
			t.Errorf("transition %s → %s is recorded as alice's", tr.From, tr.To)
		}
	}
	if len(in.Transitions) == 0 || in.Transitions[0].Operator != store.OperatorNATS {
		t.Errorf("transitions = %+v, want the CREATED one by %q", in.Transitions, store.OperatorNATS)
	}
	recs, err := a.store.ListAudit(ctx, store.AuditFilter{Operator: "alice-the-admin"})
	if err != nil || len(recs) != 0 {
		t.Errorf("audit records of alice = %+v, %v; want none", recs, err)
	}

	// A cancel order outside the API changes nothing.
	victim := a.fire("payroll", map[string]int{"n": 1})
	order := schemas.TriggerEvent{EventID: "order-1", Source: schemas.SourceManual, Operator: "alice-the-admin",
		Cancel: &schemas.CancelOf{InstanceID: victim, Reason: "forged"}}
	if _, err := streams.Publish(ctx, js, a.top.Trigger("payroll"), "", order); err != nil {
		t.Fatal(err)
	}
	// It is recorded as a SKIPPED instance that says why, under its
	// stream sequence (its body is not taken as it is).
	var reason string
	waitFor(t, "the forged cancel order to be refused", time.Minute, func() (bool, error) {
		err := a.pool.QueryRow(ctx, `SELECT t.reason FROM instances i JOIN instance_transition_log t ON t.instance_id = i.id
			WHERE i.task = 'payroll' AND i.state = 'SKIPPED' AND t.reason <> '' LIMIT 1`).Scan(&reason)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	})
	if !strings.Contains(reason, "cancel order is taken only from the API") {
		t.Errorf("the refusal says %q", reason)
	}
	if in, err := a.store.GetInstance(ctx, victim); err != nil || in.State == schemas.StateCancelled {
		t.Errorf("instance %d = %s, %v; the forged order cancelled it", victim, in.State, err)
	}

	// The API's subject is the api's alone.
	apiSubject := a.top.APITrigger("payroll")
	if err := errors.Join(nc.Publish(apiSubject, []byte(`{"event_id":"spoof-2","source":"manual","operator":"alice-the-admin"}`)), nc.Flush()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to refuse the API's subject", time.Minute, func() (bool, error) { return v.Refused(apiSubject), nil })

	// The API's firing names the holder of its token.
	id := a.fire("payroll", nil)
	in, err = a.store.GetInstance(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Transitions) == 0 || in.Transitions[0].Operator == store.OperatorNATS || in.Transitions[0].Operator == "" {
		t.Errorf("the API's firing: transitions %+v, want its token's name", in.Transitions)
	}
}

// instanceOf waits for the instance of task's firing eventID and returns it.
func (a *authSystem) instanceOf(task, eventID string) schemas.Instance {
	a.t.Helper()
	var in schemas.Instance
	waitFor(a.t, "the instance of "+eventID, time.Minute, func() (bool, error) {
		got, err := a.store.InstanceByEvent(context.Background(), task, eventID)
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		in, err = a.store.GetInstance(context.Background(), got.ID)
		return err == nil, err
	})
	return in
}
