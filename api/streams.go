package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/streams"
)

// listStreams answers GET /v1/streams: each stream and bucket of AX's
// topology with its state and its consumers.
func (s *Service) listStreams(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), readNATSTimeout)
	defer cancel()
	out := wire.StreamList{Streams: []wire.StreamInfo{}}
	type name struct{ stream, bucket string }
	var names []name
	for _, c := range s.opts.Topology.StreamConfigs(streams.Config{}) {
		names = append(names, name{stream: c.Name})
	}
	for _, c := range s.opts.Topology.BucketConfigs(streams.Config{}) {
		names = append(names, name{stream: "KV_" + c.Bucket, bucket: c.Bucket})
	}
	for _, n := range names {
		info, err := s.streamInfo(ctx, n.stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			out.Missing = append(out.Missing, n.stream)
			continue
		}
		if err != nil {
			return s.natsUnavailable(r, "read the streams", err)
		}
		info.Bucket = n.bucket
		out.Streams = append(out.Streams, info)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// streamInfo reads one stream's state and its consumers'.
func (s *Service) streamInfo(ctx context.Context, name string) (wire.StreamInfo, error) {
	stream, err := s.js.Stream(ctx, name)
	if err != nil {
		return wire.StreamInfo{}, fmt.Errorf("look up stream %s: %w", name, err)
	}
	si := stream.CachedInfo()
	out := wire.StreamInfo{
		Name:      name,
		Subjects:  si.Config.Subjects,
		Retention: strings.ToLower(si.Config.Retention.String()),
		Messages:  si.State.Msgs,
		Bytes:     si.State.Bytes,
		FirstSeq:  si.State.FirstSeq,
		LastSeq:   si.State.LastSeq,
		Consumers: []wire.ConsumerInfo{},
	}
	lister := stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		c := wire.ConsumerInfo{
			Name:        ci.Name,
			Durable:     ci.Config.Durable != "",
			Pending:     ci.NumPending,
			AckPending:  ci.NumAckPending,
			Redelivered: ci.NumRedelivered,
			Waiting:     ci.NumWaiting,
			Pool:        ci.Config.Metadata["ax_pool"],
		}
		if w := ci.Config.Metadata["ax_worker"]; c.Pool == "" && w != "" {
			c.Pool = "worker:" + w
		}
		if ci.Delivered.Last != nil {
			at := ci.Delivered.Last.UTC()
			c.LastActive = &at
		}
		out.Consumers = append(out.Consumers, c)
	}
	if err := lister.Err(); err != nil {
		return wire.StreamInfo{}, fmt.Errorf("list the consumers of stream %s: %w", name, err)
	}
	slices.SortFunc(out.Consumers, func(a, b wire.ConsumerInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
