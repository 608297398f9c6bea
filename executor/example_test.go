package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/nats-io/nats.go"

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
	mux.Handle("billing.invoice", executor.JSON(func(ctx context.Context, t *executor.Job, inv Invoice) (any, error) {
		log := executor.Logger(ctx)
		if inv.Cents <= 0 {
			return nil, executor.Permanent(fmt.Errorf("invoice for %s: %d cents; the amount must be positive", inv.Customer, inv.Cents))
		}
		log.Info("sending invoice", "customer", inv.Customer, "cents", inv.Cents)
		// InstanceID is stable across retries: use it as an idempotency key.
		return map[string]string{"invoice_id": fmt.Sprintf("inv-%d", t.InstanceID)}, nil
	}))

	// Outside a worker, a handler is a plain function to call (and to unit test).
	h, _ := mux.Handler("billing.invoice")
	for _, payload := range []string{`{"customer": "acme", "cents": 1200}`, `{"customer": "acme", "cents": 0}`, `{"client": "acme"}`} {
		out, err := h.HandleTask(context.Background(), &executor.Job{InstanceID: 7, Name: "invoice", Payload: json.RawMessage(payload)})
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

// The logger in a handler's context is a *slog.Logger: its records are the
// instance's task log, each line naming the task, instance, attempt and
// worker.
func ExampleLogger() {
	mux := executor.NewMux()
	mux.HandleFunc("reports.nightly", func(ctx context.Context, t *executor.Job) (any, error) {
		log := executor.Logger(ctx)
		log.Info("report built", "rows", 1200)
		if t.Attempt == t.MaxAttempts {
			log.Warn("last attempt")
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
	mux.Handle("billing.invoice", executor.JSON(func(ctx context.Context, t *executor.Job, inv Invoice) (any, error) {
		return nil, nil
	}))

	w, err := executor.New(executor.Options{
		Conn:   nc,
		Pools:  []string{"default", "eu"},
		Slots:  8,
		Mux:    mux,
		Logger: slog.New(slog.NewJSONHandler(os.Stderr, nil)),
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

// Order is the payload of the task "orders.checkout".
type Order struct {
	ID    int64 `json:"id"`
	Cents int64 `json:"cents"`
}

func charge(context.Context, Order) error      { return nil }
func sendReceipt(context.Context, Order) error { return nil }

// A checkout handler charges the order once, however often the attempt is
// retried: the charge runs under Once with a key that names the order, so
// a retry after a failed receipt skips it. A payload that no retry can fix
// fails permanently, and every step logs through the context's logger,
// tagged with the attempt.
func ExampleOnce() {
	mux := executor.NewMux()
	mux.Handle("orders.checkout", executor.JSON(func(ctx context.Context, t *executor.Job, o Order) (any, error) {
		log := executor.Logger(ctx)
		if o.Cents <= 0 {
			return nil, executor.Permanent(fmt.Errorf("order %d: %d cents; the amount must be positive", o.ID, o.Cents))
		}
		err := executor.Once(ctx, fmt.Sprintf("charge-order-%d", o.ID), func(ctx context.Context) error {
			log.Info("charging", "order", o.ID, "cents", o.Cents)
			return charge(ctx, o)
		})
		if err != nil {
			return nil, err
		}
		// From here on a failure retries the attempt, never the charge.
		if err := sendReceipt(ctx, o); err != nil {
			log.Warn("receipt not sent; retrying", "error", err, "attempt", t.Attempt)
			return nil, err
		}
		return map[string]int64{"charged_cents": o.Cents}, nil
	}))
}

// Options bound how a worker runs a handler: a slow export takes at most
// two of the worker's slots, so other handlers keep running beside it; a
// partner's API is called at most 10 times a second, in bursts of 5.
func ExampleMux_Handle() {
	mux := executor.NewMux()
	mux.HandleFunc("reports.export", func(ctx context.Context, t *executor.Job) (any, error) {
		return nil, nil
	}, executor.Concurrency(2))
	mux.HandleFunc("partner.sync", func(ctx context.Context, t *executor.Job) (any, error) {
		return nil, nil
	}, executor.RateLimit(10, 5), executor.Concurrency(4))
	fmt.Println(mux.Names())
	// Output: [partner.sync reports.export]
}

// Middleware runs around every handler of the mux, as net/http middleware
// runs around an http.Handler; the mux itself is a Handler that runs the
// handler t.Handler names.
func ExampleMux_Use() {
	mux := executor.NewMux()
	mux.Use(func(next executor.Handler) executor.Handler {
		return executor.HandlerFunc(func(ctx context.Context, t *executor.Job) (any, error) {
			out, err := next.HandleTask(ctx, t)
			fmt.Printf("%s attempt %d: err=%v\n", t.Handler, t.Attempt, err)
			return out, err
		})
	})
	mux.HandleFunc("mail.send", func(ctx context.Context, t *executor.Job) (any, error) {
		return nil, errors.New("smtp: connection refused")
	})

	_, _ = mux.HandleTask(context.Background(), &executor.Job{Name: "welcome-mail", Handler: "mail.send", Attempt: 1})
	// Output: mail.send attempt 1: err=smtp: connection refused
}

// Quote is the output of the task "pricing.quote".
type Quote struct {
	Cents int64 `json:"cents"`
}

// JSON's second type is the handler's output: the function returns a Quote
// and the report carries it as JSON. Lenient decodes a payload that has
// fields the type does not know, which the strict default refuses.
func ExampleLenient() {
	quote := func(ctx context.Context, t *executor.Job, inv Invoice) (Quote, error) {
		return Quote{Cents: inv.Cents * 120 / 100}, nil
	}
	strict := executor.JSON(quote)
	lenient := executor.JSON(quote, executor.Lenient())

	payload := json.RawMessage(`{"customer": "acme", "cents": 1000, "currency": "EUR"}`)
	for _, h := range []executor.Handler{strict, lenient} {
		out, err := h.HandleTask(context.Background(), &executor.Job{Name: "quote", Payload: payload})
		fmt.Printf("%+v %v\n", out, err)
	}
	// Output:
	// <nil> task "quote": payload does not fit executor_test.Invoice: json: unknown field "currency"
	// {Cents:1200} <nil>
}

// RetryAfter fails the attempt and asks for the next one at a given time,
// in place of the task's backoff: for work that knows when it can run.
func ExampleRetryAfter() {
	errLimited := errors.New("api.example.com: 429 too many requests")
	err := executor.RetryAfter(90*time.Second, errLimited)
	fmt.Println(err, errors.Is(err, errLimited), executor.IsPermanent(err))
	// Permanent wins: the instance fails without another attempt.
	fmt.Println(executor.IsPermanent(executor.Permanent(err)))
	// Output:
	// api.example.com: 429 too many requests true false
	// true
}
