package streams_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

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
