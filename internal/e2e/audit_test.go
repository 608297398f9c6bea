package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/auditor"
	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// auditors starts n auditors on the system, each on its own connection:
// one leads, the others stand by.
func (s *system) auditors(n int) {
	for range n {
		conn, _ := s.srv.Connect()
		a, err := auditor.New(auditor.Options{Conn: conn, Store: s.store, PollInterval: 10 * time.Millisecond,
			RetryInterval: 100 * time.Millisecond, Logger: s.log})
		if err != nil {
			s.t.Fatal(err)
		}
		servicetest.Go(s.t, "auditor", a.Run)
	}
}

// outboxSize counts the records of the audit trail's outbox tables: the
// operator actions and the transitions (a row of instance_transitions may
// hold two).
func (s *system) outboxSize() uint64 {
	s.t.Helper()
	var n uint64
	err := s.pool.QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM instance_transition_log) + (SELECT count(*) FROM operator_actions)`).Scan(&n)
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

// auditTrail reads AX_AUDIT from its first message to its last.
func (s *system) auditTrail() []schemas.AuditRecord {
	s.t.Helper()
	ctx := context.Background()
	stream, err := s.js.Stream(ctx, s.srv.Topology.AuditStream())
	if err != nil {
		s.t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	var out []schemas.AuditRecord
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			s.t.Fatalf("read AX_AUDIT message %d: %v", seq, err)
		}
		// Either version of the audit protocol: a record, or a task's
		// records with the last one's id as the message's.
		recs, err := schemas.DecodeAuditMessage(m.Data)
		if err != nil {
			s.t.Fatal(err)
		}
		id := m.Header.Get(streams.HeaderMsgID)
		if len(recs) == 0 || id != recs[len(recs)-1].ID {
			s.t.Errorf("AX_AUDIT message %d holds %d records with Nats-Msg-Id %q", seq, len(recs), id)
		}
		for _, r := range recs {
			if m.Subject != s.srv.Topology.Audit(r.Task) {
				s.t.Errorf("record %s is on %s with Nats-Msg-Id %q", r.ID, m.Subject, id)
			}
		}
		out = append(out, recs...)
	}
	return out
}

func TestAuditTrailHoldsEveryTransitionAndActionOnce(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.auditors(2)
	s.countingExecutor(4)
	alice := s.clientAs("alice", schemas.RoleAdmin)
	ctx := context.Background()
	for _, def := range []string{
		"task_name: hello\nexecution: {handler: test.count}\n",
		"task_name: flaky\nexecution: {handler: builtin.fail, retry: {max_attempts: 2, initial_interval_sec: 0}}\n",
	} {
		if _, err := alice.ApplyTask(ctx, []byte(def), "application/yaml"); err != nil {
			t.Fatal(err)
		}
	}
	var ids []int64
	for range 5 {
		ids = append(ids, s.fire("hello", map[string]int{"n": 1}))
	}
	ids = append(ids, s.fire("flaky", nil))
	if _, err := alice.SetTaskEnabled(ctx, "hello", false); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.SetTaskEnabled(ctx, "hello", true); err != nil {
		t.Fatal(err)
	}
	instances := make(map[int64]schemas.Instance)
	for i, id := range ids {
		want := schemas.StateSucceeded
		if i == len(ids)-1 {
			want = schemas.StateFailed
		}
		instances[id] = s.waitState(id, want, 60*time.Second)
	}

	total := s.outboxSize()
	waitFor(t, "AX_AUDIT to hold the whole outbox", 60*time.Second, func() (bool, error) {
		return uint64(len(s.auditTrail())) >= total, nil
	})

	trail := s.auditTrail()
	if uint64(len(trail)) != total {
		t.Errorf("AX_AUDIT holds %d records, the outbox %d", len(trail), total)
	}
	seen := make(map[string]bool)
	onStream := make(map[int64][]schemas.AuditRecord)
	var actions []string
	for _, r := range trail {
		if seen[r.ID] {
			t.Errorf("record %s is on AX_AUDIT twice", r.ID)
		}
		seen[r.ID] = true
		switch r.Kind {
		case schemas.AuditTransition:
			onStream[r.InstanceID] = append(onStream[r.InstanceID], r)
		case schemas.AuditAction:
			actions = append(actions, string(r.Action)+" "+r.Task+" by "+r.Operator)
		}
	}
	// The two tokens the test made come first: making a token is audited too.
	wantActions := []string{"token_create _tokens by apitest", "token_create _tokens by apitest",
		"apply hello by alice", "apply flaky by alice", "disable hello by alice", "enable hello by alice"}
	if len(actions) != len(wantActions) {
		t.Errorf("actions on AX_AUDIT = %q, want %q", actions, wantActions)
	}
	for i := range min(len(actions), len(wantActions)) {
		if actions[i] != wantActions[i] {
			t.Errorf("actions on AX_AUDIT = %q, want %q", actions, wantActions)
			break
		}
	}

	// Every transition of every instance, in the instance's order, as the
	// store has it.
	for id, inst := range instances {
		got := onStream[id]
		if len(got) != len(inst.Transitions) {
			t.Errorf("instance %d: %d transitions on AX_AUDIT, %d in the store", id, len(got), len(inst.Transitions))
			continue
		}
		for i, tr := range inst.Transitions {
			r := got[i]
			if r.ID != schemas.TransitionAuditID(tr.ID) || r.Task != tr.Task || r.From != tr.From || r.To != tr.To ||
				r.Attempt != tr.Attempt || r.Operator != tr.Operator || r.Reason != tr.Reason || !r.At.Equal(tr.At) {
				t.Errorf("instance %d transition %d: AX_AUDIT has %+v, the store %+v", id, i, r, tr)
			}
		}
	}

	// The API reads the same trail from PostgreSQL.
	recs, err := s.client.Audit(ctx, apiclient.AuditQuery{Limit: store.MaxAuditLimit})
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(recs)) != total {
		t.Errorf("GET /v1/audit returned %d records, the outbox holds %d", len(recs), total)
	}
	for _, r := range recs {
		if !seen[r.ID] {
			t.Errorf("GET /v1/audit returned %s, which is not on AX_AUDIT", r.ID)
		}
	}
}
