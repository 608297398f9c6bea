// Command fence is a worked example of AX's fencing token
// ([executor.Job.Fence]): an executor whose handler, example.settle,
// books a settlement into the user's own PostgreSQL database through
// package fencepg, or posts it to a downstream service with the AX-Fence
// header (package fencehttp). An attempt that AX has moved on from — its
// worker was paused past its lease, and the retry has written — is
// refused by the fence instead of writing a second settlement.
//
//	ax apply -f examples/fence/settle.yaml
//	go run ./examples/fence --nats-url nats://127.0.0.1:4222 \
//	    --database-url postgres://localhost/shop
//	ax fire settle --payload '{"account": "acme", "amount_cents": 1200}'
//
// The handler keeps one fence per settlement (resource "settlement/" +
// the firing's event id), raises it to the attempt's token in the
// transaction that inserts the row, and so commits nothing when a newer
// attempt of the same firing has committed. --work makes the handler
// work that long before it writes, to pause the worker in (kill -STOP).
// --ignore-cancel lets the write go on after the attempt's context ended,
// as that of a handler that does not watch its context, or of a host that
// cannot learn it lost its lease, would: the fence refuses it all the same.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/fencehttp"
	"github.com/ax-scheduler/ax/executor/fencepg"
	"github.com/ax-scheduler/ax/streams"
)

// Schema is the user's table the example writes to.
const Schema = `CREATE TABLE IF NOT EXISTS settlements (
	event_id     text NOT NULL,
	instance_id  bigint NOT NULL,
	attempt      int NOT NULL,
	fence        bigint NOT NULL,
	worker_id    text NOT NULL,
	account      text NOT NULL,
	amount_cents bigint NOT NULL
)`

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fence:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		natsURL      = flag.String("nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server URL (env NATS_URL)")
		workerID     = flag.String("worker-id", os.Getenv("AX_WORKER_ID"), "worker id")
		dbURL        = flag.String("database-url", os.Getenv("DATABASE_URL"), "the user's PostgreSQL database to write to (env DATABASE_URL)")
		downstream   = flag.String("downstream", "", "a service to POST each settlement to, with the AX-Fence header, instead of the database")
		work         = flag.Duration("work", 0, "how long the handler works before it writes")
		ignoreCancel = flag.Bool("ignore-cancel", false, "write even after the attempt's context ended")
	)
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	s := &settler{work: *work, ignoreCancel: *ignoreCancel, downstream: *downstream}
	if *downstream == "" {
		pool, err := pgxpool.New(ctx, *dbURL)
		if err != nil {
			return fmt.Errorf("--database-url: %w", err)
		}
		defer pool.Close()
		if _, err := pool.Exec(ctx, Schema); err != nil {
			return fmt.Errorf("create settlements: %w", err)
		}
		if err := fencepg.Ensure(ctx, pool); err != nil {
			return err
		}
		s.db = pool
	}

	nc, err := nats.Connect(*natsURL, nats.Name("ax fence example"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", *natsURL, err)
	}
	defer nc.Close()
	top, err := streams.NewTopology(streams.DefaultPrefix)
	if err != nil {
		return err
	}
	mux := executor.NewMux()
	mux.Handle("example.settle", executor.JSON(s.settle))
	svc, err := executor.New(executor.Options{Conn: nc, Topology: top, WorkerID: *workerID, Mux: mux, Logger: log})
	if err != nil {
		return err
	}
	log.Info("fence example executor running", "worker_id", *workerID)
	return svc.Run(ctx)
}

// Settlement is example.settle's payload.
type Settlement struct {
	Account     string `json:"account"`
	AmountCents int64  `json:"amount_cents"`
}

type settler struct {
	db           *pgxpool.Pool
	downstream   string
	work         time.Duration
	ignoreCancel bool
}

// settle books one settlement, fenced by the attempt's token.
func (s *settler) settle(ctx context.Context, job *executor.Job, p Settlement) (any, error) {
	log := executor.Logger(ctx)
	log.Info("settling", "fence", job.Fence())
	time.Sleep(s.work) // the work, deaf to ctx: a pause here outlives the lease
	if s.ignoreCancel {
		ctx = context.WithoutCancel(ctx)
	}
	var err error
	if s.downstream != "" {
		err = s.post(ctx, job, p)
	} else {
		err = fencepg.Write(ctx, s.db, "settlement/"+job.EventID, job.Fence(), func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO settlements (event_id, instance_id, attempt, fence, worker_id, account, amount_cents)
				VALUES ($1, $2, $3, $4, $5, $6, $7)`, job.EventID, job.InstanceID, job.Attempt, int64(job.Fence()), job.WorkerID, p.Account, p.AmountCents)
			return err
		})
	}
	if errors.Is(err, fencepg.ErrStale) || errors.Is(err, errStaleHTTP) {
		log.Warn("settlement fenced out: a newer attempt has written it", "fence", job.Fence(), "error", err)
		return nil, executor.Permanent(err)
	}
	if err != nil {
		return nil, err
	}
	log.Info("settled", "fence", job.Fence())
	return map[string]any{"fence": job.Fence()}, nil
}

var errStaleHTTP = errors.New("the downstream service refused a stale fence (409)")

// post sends the settlement to the downstream service with the token.
func (s *settler) post(ctx context.Context, job *executor.Job, p Settlement) error {
	body, _ := json.Marshal(map[string]any{"event_id": job.EventID, "attempt": job.Attempt, "account": p.Account, "amount_cents": p.AmountCents})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.downstream+"/settlements/"+job.EventID, bytes.NewReader(body))
	if err != nil {
		return err
	}
	fencehttp.Set(req, job)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusConflict:
		return errStaleHTTP
	case resp.StatusCode >= 300:
		return fmt.Errorf("downstream: %s", resp.Status)
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
