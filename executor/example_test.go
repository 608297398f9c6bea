package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/executor"
)

// Invoice is the payload of the task "billing.invoice".
type Invoice struct {
	Customer string `json:"customer"`
	Cents    int64  `json:"cents"`
}

// A handler takes its payload typed with JSON, logs through the logger the
// worker put in its context, and marks failures that a retry cannot fix
// with Permanent.
func ExampleJSON() {
	mux := executor.NewMux()
	mux.Handle("billing.invoice", executor.JSON(func(ctx context.Context, t *executor.Task, inv Invoice) (any, error) {
		log := executor.Logger(ctx)
		if inv.Cents <= 0 {
			return nil, executor.Permanent(fmt.Errorf("invoice for %s: %d cents; the amount must be positive", inv.Customer, inv.Cents))
		}
		log.Info().Str("customer", inv.Customer).Int64("cents", inv.Cents).Msg("sending invoice")
		// InstanceID is stable across retries: use it as an idempotency key.
		return map[string]string{"invoice_id": fmt.Sprintf("inv-%d", t.InstanceID)}, nil
	}))

	// Outside a worker, a handler is a plain function to call (and to unit test).
	h, _ := mux.Handler("billing.invoice")
	for _, payload := range []string{`{"customer": "acme", "cents": 1200}`, `{"customer": "acme", "cents": 0}`, `{"client": "acme"}`} {
		out, err := h.HandleTask(context.Background(), &executor.Task{InstanceID: 7, Name: "invoice", Payload: json.RawMessage(payload)})
		fmt.Println(out, err, executor.IsPermanent(err))
	}
	// Output:
	// map[invoice_id:inv-7] <nil> false
	// <nil> invoice for acme: 0 cents; the amount must be positive true
	// <nil> task "invoice": payload does not fit executor_test.Invoice: json: unknown field "client" true
}

// A plain error fails the attempt and the task's retry policy decides
// about the next one; Permanent fails it for good.
func ExamplePermanent() {
	errNotFound := errors.New("customer not found")
	err := executor.Permanent(fmt.Errorf("load customer 42: %w", errNotFound))
	fmt.Println(err)
	fmt.Println(executor.IsPermanent(err), errors.Is(err, errNotFound))
	fmt.Println(executor.IsPermanent(errors.New("connection refused")))
	// Output:
	// load customer 42: customer not found
	// true true
	// false
}

// The logger in a handler's context is tagged with the attempt: every line
// names the task, instance, attempt and worker.
func ExampleLogger() {
	mux := executor.NewMux()
	mux.HandleFunc("reports.nightly", func(ctx context.Context, t *executor.Task) (any, error) {
		log := executor.Logger(ctx)
		log.Info().Int("rows", 1200).Msg("report built")
		if t.Attempt == t.MaxAttempts {
			log.Warn().Msg("last attempt")
		}
		return nil, nil
	})
	fmt.Println(mux.Names())
	// Output: [reports.nightly]
}

// A worker binary: register the handlers, connect to NATS and run until
// interrupted.
func ExampleNew() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer nc.Close()

	mux := executor.NewMux()
	executor.RegisterBuiltins(mux)
	mux.Handle("billing.invoice", executor.JSON(func(ctx context.Context, t *executor.Task, inv Invoice) (any, error) {
		return nil, nil
	}))

	w, err := executor.New(executor.Options{
		Conn:   nc,
		Pools:  []string{"default", "eu"},
		Slots:  8,
		Mux:    mux,
		Logger: zerolog.New(os.Stderr).With().Timestamp().Logger(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}
