package e2e_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// putWorker puts a worker record in ax-workers as a worker in another
// language would, with the fields given (raw JSON, so that a field can be
// left out), and waits until the dispatcher routes over it.
func (s *system) putWorker(id string, fields map[string]any) {
	s.t.Helper()
	rec := map[string]any{"id": id, "version": "", "pools": []string{schemas.DefaultPool}, "slots": 4, "busy": 0,
		"started_at": time.Now(), "heartbeat_at": time.Now()}
	for k, v := range fields {
		rec[k] = v
	}
	data, err := json.Marshal(rec)
	if err != nil {
		s.t.Fatal(err)
	}
	kv, err := s.js.KeyValue(context.Background(), s.srv.Topology.WorkersBucket())
	if err != nil {
		s.t.Fatal(err)
	}
	// Its grant keys, as every worker writes them with its heartbeat.
	var claimed struct{ Pools, Handlers []string }
	_ = json.Unmarshal(data, &claimed)
	for _, p := range claimed.Pools {
		for _, h := range claimed.Handlers {
			if _, err := kv.Put(context.Background(), streams.GrantKey(id, p, h), nil); err != nil {
				s.t.Fatal(err)
			}
		}
	}
	if _, err := kv.Put(context.Background(), id, data); err != nil {
		s.t.Fatal(err)
	}
	waitFor(s.t, "the dispatcher to see worker "+id, 60*time.Second, func() (bool, error) {
		for _, w := range s.dispatcher.Workers() {
			if w.ID == id {
				return true, nil
			}
		}
		return false, nil
	})
}

// ownDispatch takes the next message routed to worker id's own subject, as
// that worker would, and returns it decoded.
func (s *system) ownDispatch(id string) schemas.Dispatch {
	s.t.Helper()
	ctx := context.Background()
	c, err := s.js.CreateOrUpdateConsumer(ctx, s.srv.Topology.DispatchStream(), s.srv.Topology.WorkerConsumer(id))
	if err != nil {
		s.t.Fatal(err)
	}
	m, err := c.Next(jetstream.FetchMaxWait(60 * time.Second))
	if err != nil {
		s.t.Fatalf("no dispatch message for worker %s: %v", id, err)
	}
	_ = m.Ack()
	var d schemas.Dispatch
	if err := json.Unmarshal(m.Data(), &d); err != nil {
		s.t.Fatal(err)
	}
	return d
}

// TestRoutingProtocol checks that the dispatcher routes an attempt only to
// workers that speak the version of the executor protocol its message is
// written in: a dispatcher writing a version later than the Go
// executor's gives a pull attempt to the own subject of the worker whose
// record says that version, never to the pool's subject, where the Go
// executor or a record without the field (version 1) would pull it; and a
// record without the field counts as version 1, which a dispatcher of the
// default version (1) routes to.
func TestRoutingProtocol(t *testing.T) {
	t.Run("later version", func(t *testing.T) {
		later := schemas.ExecutorProtocol + 1
		s := newSystem(t, func(o *dispatcher.Options) { o.Protocol = later })
		var c calls
		s.worker(executor.Options{WorkerID: "current", Mux: c.mux("current")})
		s.putWorker("legacy", map[string]any{"handlers": []string{"test.where"}})
		s.putWorker("next", map[string]any{"handlers": []string{"test.where"}, "protocol": later})
		s.apply("task_name: versioned\nexecution: {handler: test.where}\n")
		id := s.fire("versioned", nil)
		d := s.ownDispatch("next")
		if d.InstanceID != id || d.Protocol != later || d.Handler != "test.where" {
			t.Fatalf("worker next got %+v, want instance %d in protocol %d", d, id, later)
		}
		if n := c.of("current"); n != 0 {
			t.Errorf("the worker of protocol %d ran %d attempts written in protocol %d", schemas.ExecutorProtocol, n, later)
		}
		if inst, err := s.store.GetInstance(context.Background(), id); err != nil || inst.State != schemas.StateDispatched {
			t.Errorf("instance %d: %s (%v), want DISPATCHED to worker next", id, inst.State, err)
		}
	})
	t.Run("field left out", func(t *testing.T) {
		s := newSystem(t)
		s.putWorker("legacy", map[string]any{"handlers": []string{"test.where"}, "version": "2.0.0"})
		s.apply("task_name: legacy\nexecution: {handler: test.where}\nmin_worker_version: 2.0.0\n")
		id := s.fire("legacy", nil)
		d := s.ownDispatch("legacy")
		if d.InstanceID != id || d.Protocol != 1 || !d.ReportBatches {
			t.Fatalf("worker legacy got %+v, want instance %d in protocol 1, offering report batches", d, id)
		}
	})
}
