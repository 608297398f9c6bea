package streams

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// errCodeNoPeers is JetStream's error code for a stream or consumer whose
// replicas it found no peers to place on (nats-server's
// JSClusterNoPeersErrF).
const errCodeNoPeers jetstream.ErrorCode = 10005

// Waits of [UntilStarted] between two tries: the first, doubling up to the
// last.
const (
	FirstStartWait = 250 * time.Millisecond
	MaxStartWait   = 10 * time.Second
)

// UntilStarted calls setUp — a service's start-up work on the topology:
// ensuring it, looking up what it uses, making its consumers — until it
// succeeds, fails for a reason waiting cannot cure, or ctx ends. After a
// failure that waiting may cure (see [Transient]: a JetStream API request
// unanswered or answered "unavailable", as on a cluster that has no meta
// leader yet or a node still starting), it calls onFail with the error and
// the wait, waits from [FirstStartWait], doubling up to [MaxStartWait], and
// tries again. It returns nil once setUp succeeded, setUp's error when it
// is not transient (a stream that is missing, a setting that is wrong:
// the error says so and how to fix it), or ctx's error when ctx ends first.
// setUp must be safe to call again after a failure.
//
// setUp is given ctx without its deadline, ended when ctx ends: a
// JetStream request whose context has a deadline waits for it instead of
// its own timeout, so one request a cluster never answers (a stream's
// create dropped as the meta leader changes) would hold the start-up until
// ctx's deadline instead of being tried again. What setUp starts on its
// context (a watch, a consume) lives as long as ctx.
func UntilStarted(ctx context.Context, onFail func(err error, wait time.Duration), setUp func(context.Context) error) error {
	tryCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	for wait := FirstStartWait; ; wait = min(2*wait, MaxStartWait) {
		err := setUp(tryCtx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !Transient(err) {
			return err
		}
		onFail(err, wait)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// Transient reports whether err is one that waiting may cure: a request to
// the JetStream API that timed out or had no responder, a connection that
// is reconnecting, JetStream not (yet) enabled on the server, the API's
// answer that it is unavailable or failed on the server's side (5xx, as a
// cluster without a meta leader or a stream without a quorum answers), or
// that it found no peers to place a stream's replicas on because a peer is
// offline (err_code 10005, "no suitable peers for placement, peer
// offline": a node starting or restarting, which the meta leader has not
// heard from yet). Any other refusal of the request itself (4xx: not
// found, a configuration in conflict, no permission, more replicas than
// the cluster has nodes) is not.
func Transient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code >= 500 ||
			apiErr.ErrorCode == errCodeNoPeers && strings.Contains(apiErr.Description, "peer offline")
	}
	for _, e := range []error{context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoResponders, nats.ErrConnectionReconnecting,
		nats.ErrDisconnected, jetstream.ErrJetStreamNotEnabled, jetstream.ErrJetStreamNotEnabledForAccount, jetstream.ErrNoStreamResponse} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
