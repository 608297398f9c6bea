package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// readNATSTimeout bounds the NATS reads of one request for workers or streams.
const readNATSTimeout = 10 * time.Second

// listWorkers answers GET /v1/workers from the ax-workers bucket: every
// worker whose last heartbeat has not expired, by id.
func (s *Service) listWorkers(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), readNATSTimeout)
	defer cancel()
	workers, err := s.readWorkers(ctx)
	if err != nil {
		return s.natsUnavailable(r, "read the workers", err)
	}
	writeJSON(w, http.StatusOK, wire.WorkerList{Workers: workers})
	return nil
}

// readWorkers reads every worker in the ax-workers bucket: the values there
// when the watch starts, then it stops.
func (s *Service) readWorkers(ctx context.Context) ([]schemas.Worker, error) {
	bucket := s.opts.Topology.WorkersBucket()
	kv, err := s.js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("look up bucket %s: %w", bucket, err)
	}
	watcher, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("watch bucket %s: %w", bucket, err)
	}
	defer func() { _ = watcher.Stop() }()
	workers := []schemas.Worker{}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read bucket %s: %w", bucket, ctx.Err())
		case e, ok := <-watcher.Updates():
			if !ok {
				return nil, fmt.Errorf("read bucket %s: the watch ended early", bucket)
			}
			if e == nil { // every value there at the start was delivered
				slices.SortFunc(workers, func(a, b schemas.Worker) int { return strings.Compare(a.ID, b.ID) })
				return workers, nil
			}
			if _, _, _, grant := streams.ParseGrantKey(e.Key()); grant {
				// A grant key beside a heartbeat, not a worker.
				continue
			}
			var wk schemas.Worker
			if err := json.Unmarshal(e.Value(), &wk); err != nil {
				// One bad record must not hide the others: show its key.
				wk = schemas.Worker{ID: e.Key()}
			}
			workers = append(workers, wk)
		}
	}
}

// natsUnavailable returns the 503 for a NATS read that failed, and logs why.
func (s *Service) natsUnavailable(r *http.Request, op string, err error) *wire.Error {
	s.opts.Logger.Error().Err(err).Str("method", r.Method).Str("path", r.URL.Path).Msg(op)
	msg := fmt.Sprintf("cannot %s: %v; check that NATS is up and that the dispatcher (or ax dev) has made AX's streams", op, err)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		msg = fmt.Sprintf("cannot %s: %v; start the dispatcher (or ax dev) once: it makes AX's streams and buckets", op, err)
	}
	return &wire.Error{Status: http.StatusServiceUnavailable, Code: "nats_unavailable", Message: msg}
}
