package streams_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/streams"
)

// TestTransient tells the start-up failures that waiting may cure from
// those it cannot.
func TestTransient(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("ensure stream AX_TRIGGERS: %w", context.DeadlineExceeded), true},
		{nats.ErrTimeout, true},
		{nats.ErrNoResponders, true},
		{fmt.Errorf("look up stream AX_DISPATCH: %w", jetstream.ErrJetStreamNotEnabled), true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{fmt.Errorf("look up stream AX_LOGS: %w", jetstream.ErrStreamNotFound), false},
		{fmt.Errorf("look up bucket ax-tasks: %w", jetstream.ErrBucketNotFound), false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10065, Description: "subjects overlap with an existing stream"}, false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, peer offline"}, true},
		{&jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, insufficient storage"}, false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement"}, false},
		{errors.New("bucket ax-mutex has no limit markers"), false},
	} {
		if got := streams.Transient(c.err); got != c.want {
			t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A JetStream request whose ctx has a deadline waits for that deadline,
// not its own timeout. A cluster may leave a request unanswered (a
// stream's create dropped as the meta leader changes): a try of
// UntilStarted must still end at the request's timeout and try again, not
// hold the start-up until ctx ends.
func TestUntilStartedTriesAgainAfterARequestNobodyAnswers(t *testing.T) {
	t.Parallel()
	nc := startJS(t).Conn()
	// A responder that takes every request of this API prefix and answers none.
	if _, err := nc.SubscribeSync("mute.>"); err != nil {
		t.Fatal(err)
	}
	const requestTimeout = 200 * time.Millisecond
	js, _ := jetstream.NewWithAPIPrefix(nc, "mute", jetstream.WithDefaultTimeout(requestTimeout))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var failures []error
	tries := 0
	err := streams.UntilStarted(ctx, func(err error, _ time.Duration) { failures = append(failures, err) },
		func(ctx context.Context) error {
			if tries++; tries == 1 {
				_, err := js.Stream(ctx, "AX_DISPATCH")
				return err
			}
			return nil
		})
	if err != nil {
		t.Fatalf("UntilStarted = %v after %d tries, want a second try once the unanswered request timed out", err, tries)
	}
	if len(failures) != 1 || !errors.Is(failures[0], context.DeadlineExceeded) {
		t.Errorf("failures reported = %v, want the one request's timeout", failures)
	}
}
