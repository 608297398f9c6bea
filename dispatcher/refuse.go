package dispatcher

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// protocolRefusal says why a dispatcher writing version protocol of the
// executor protocol cannot serve w, or "" when it can.
func protocolRefusal(w schemas.Worker, protocol int) string {
	if w.Speaks(protocol) {
		return ""
	}
	return fmt.Sprintf("worker %s is refused: its record declares version %d of the executor protocol "+
		"(protocol %d; left out counts as 1) and the dispatchers write version %d, so they route it nothing; "+
		"this AX speaks versions 1 to %d: upgrade the worker to declare %d or later (docs/executor-protocol.md, \"Versions\")",
		w.ID, schemas.ProtocolOrOne(w.Protocol), w.Protocol, protocol, schemas.ExecutorProtocol, protocol)
}

// refuseUnservable refuses, at its registration, a worker whose record
// declares a version of the executor protocol the dispatcher cannot serve:
// it logs why once, naming the versions, and tells the worker on its
// control subject (a [schemas.ControlRefuse]); the worker is never
// eligible for routing (see [liveWorkers.eligible]). refused holds the
// version each worker was refused for, so that its heartbeats do not
// repeat it; a record that changes its version or goes is forgotten.
// Used by the goroutine of watchWorkers only.
func (s *Service) refuseUnservable(e jetstream.KeyValueEntry, refused map[string]int) {
	if _, _, _, grant := streams.ParseGrantKey(e.Key()); grant {
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		delete(refused, e.Key())
		return
	}
	var w schemas.Worker
	if json.Unmarshal(e.Value(), &w) != nil {
		return
	}
	w.ID = e.Key()
	reason := protocolRefusal(w, s.opts.Protocol)
	if reason == "" {
		delete(refused, w.ID)
		return
	}
	if v, ok := refused[w.ID]; ok && v == w.Protocol {
		return
	}
	refused[w.ID] = w.Protocol
	s.log.Error().Str("worker_id", w.ID).Int("worker_protocol", schemas.ProtocolOrOne(w.Protocol)).
		Int("dispatcher_protocol", s.opts.Protocol).Msg(reason)
	data, err := json.Marshal(schemas.Control{Action: schemas.ControlRefuse, Reason: reason})
	if err != nil {
		return
	}
	if err := s.opts.Conn.Publish(s.top.Control(w.ID), data); err != nil {
		s.log.Warn().Err(err).Str("worker_id", w.ID).Msg("refusal not sent")
	}
}
