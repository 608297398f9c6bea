package schemas

import (
	"testing"
	"time"
)

func TestAttempts(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 44, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	trs := []Transition{
		{From: "", To: StateCreated, Attempt: 1, At: at(0)},
		{From: StateCreated, To: StateDispatched, Attempt: 1, At: at(0)},
		{From: StateDispatched, To: StateRunning, Attempt: 1, Operator: "worker:w1", At: at(1)},
		{From: StateRunning, To: StateRetrying, Attempt: 1, Operator: "worker:w1", Reason: "boom", At: at(3)},
		{From: StateRetrying, To: StateDispatched, Attempt: 2, At: at(5)},
		{From: StateDispatched, To: StateRetrying, Attempt: 2, Operator: "dispatcher", Reason: "lease expired", At: at(6)},
		{From: StateRetrying, To: StateDispatched, Attempt: 3, At: at(7)},
		{From: StateDispatched, To: StateRunning, Attempt: 3, Operator: "worker:w2", At: at(8)},
		{From: StateRunning, To: StateSucceeded, Attempt: 3, Operator: "worker:w2", Reason: "ok", At: at(10)},
	}
	got := Attempts(trs)
	if len(got) != 3 {
		t.Fatalf("%d attempts, want 3: %+v", len(got), got)
	}
	a1, a2, a3 := got[0], got[1], got[2]
	if a1.Attempt != 1 || a1.Worker != "w1" || a1.State != StateRetrying || a1.Error != "boom" || *a1.DurationMS != 2000 || !a1.StartedAt.Equal(at(1)) {
		t.Errorf("attempt 1 = %+v", a1)
	}
	if a2.Attempt != 2 || a2.StartedAt != nil || a2.DurationMS != nil || a2.Error != "lease expired" || !a2.EndedAt.Equal(at(6)) {
		t.Errorf("attempt 2 = %+v", a2)
	}
	if a3.Attempt != 3 || a3.Worker != "w2" || a3.State != StateSucceeded || a3.Error != "" || *a3.DurationMS != 2000 {
		t.Errorf("attempt 3 = %+v", a3)
	}
	running := Attempts(trs[:3])
	if len(running) != 1 || running[0].State != StateRunning || running[0].EndedAt != nil {
		t.Errorf("a running attempt = %+v", running)
	}
}
