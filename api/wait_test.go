package api_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/internal/wait/waittest"
	"github.com/ax-scheduler/ax/schemas"
)

// TestClientWaits checks the client's waits against the API: WaitFiring
// reads through the 404s until the firing's instance exists, and
// WaitInstance returns the instance once it has ended, or as it last was
// with the context's error.
func TestClientWaits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.apply("task_name: etl\nexecution: {handler: h}\n")
	ctx := t.Context()
	// A client that counts the 404s it is answered.
	var notFound atomic.Int64
	client := apiclient.NewClient(e.srv.URL, &http.Client{Transport: countNotFound{next: e.srv.Client().Transport, n: &notFound}})
	client.Token = e.admin

	made := make(chan int64, 1)
	type result struct {
		in  schemas.Instance
		err error
	}
	waited := make(chan result, 1)
	go func() {
		in, err := client.WaitFiring(ctx, "etl", "late")
		waited <- result{in, err}
	}()
	// The instance appears only after a first read answered 404.
	waittest.ForTrue(t, "WaitFiring's first read answered 404", 60*time.Second, func() bool { return notFound.Load() > 0 })
	made <- e.insertInstance("etl", "late", schemas.StateRunning)
	var got result
	select {
	case got = <-waited:
	case <-time.After(60 * time.Second):
		t.Fatal("WaitFiring did not return within 60s of the instance's creation")
	}
	id := <-made
	if got.err != nil || got.in.ID != id || got.in.State != schemas.StateRunning {
		t.Fatalf("WaitFiring = %d %s, %v; want instance %d RUNNING", got.in.ID, got.in.State, got.err, id)
	}

	// FireInstance waits the same way when the API answers before the
	// dispatcher made the instance (no dispatcher runs here).
	fired := make(chan result, 1)
	seen := notFound.Load()
	go func() {
		id, err := client.FireInstance(ctx, "etl", wire.FireRequest{EventID: "later"})
		fired <- result{schemas.Instance{ID: id}, err}
	}()
	waittest.ForTrue(t, "FireInstance's first read of its event answered 404", 60*time.Second, func() bool { return notFound.Load() > seen })
	later := e.insertInstance("etl", "later", schemas.StateRunning)
	select {
	case got = <-fired:
	case <-time.After(60 * time.Second):
		t.Fatal("FireInstance did not return within 60s of the instance's creation")
	}
	if got.err != nil || got.in.ID != later {
		t.Fatalf("FireInstance = %d, %v; want instance %d", got.in.ID, got.err, later)
	}

	// The wait is cut short once it has read the instance (a deadline could
	// end it before the first answer on a loaded machine, and a wait that
	// read nothing returns the zero instance).
	short, cancel := context.WithCancel(ctx)
	defer cancel()
	cutting := apiclient.NewClient(e.srv.URL, &http.Client{Transport: cancelOnAnswer{next: e.srv.Client().Transport, cancel: cancel}})
	cutting.Token = e.admin
	in, err := cutting.WaitInstance(short, id)
	if !errors.Is(err, context.Canceled) || in.ID != id || in.State != schemas.StateRunning {
		t.Fatalf("WaitInstance of a running instance = %d %s, %v; want it RUNNING with the context's error", in.ID, in.State, err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE instances SET state = 'SUCCEEDED', finished_at = now() WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if in, err = e.client.WaitInstance(ctx, id); err != nil || in.State != schemas.StateSucceeded {
		t.Fatalf("WaitInstance of an ended instance = %s, %v; want SUCCEEDED", in.State, err)
	}
}

// countNotFound counts the answers 404 of the requests it passes on.
type countNotFound struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (c countNotFound) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusNotFound {
		c.n.Add(1)
	}
	return resp, err
}

// cancelOnAnswer calls cancel once the body of an answer 200 is closed,
// after the client has read and decoded it.
type cancelOnAnswer struct {
	next   http.RoundTripper
	cancel context.CancelFunc
}

func (c cancelOnAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusOK {
		resp.Body = cancelOnClose{ReadCloser: resp.Body, cancel: c.cancel}
	}
	return resp, err
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
