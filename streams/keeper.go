package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A work-queue stream removes a message when its consumer acks it. When
// that message is the last one left in the stream's last block, a file
// store replaces the block (nats-server 2.15.3, filestore.go
// removeMsgBlock): it creates a new block file, writes a tombstone to it
// and unlinks the old one. At a low rate every ack empties AX_DISPATCH
// and AX_REPORTS, so every attempt paid two file creations:
// BenchmarkWorkQueueAck measured a publish, fetch and ack of one message
// at 932 µs of CPU with the block emptied each time and 217 µs with a
// keeper (file storage on ext4, 2 cores).
//
// A keeper is a message that no consumer reads, on a subject of the
// stream's own ([Topology.Keeper]): while it sits in the last block the
// block never empties, and an ack writes a tombstone there instead. A
// block holds a few MB: once it is full the next one begins without the
// keeper, so [Keeper.Keep] publishes a new keeper, and purges the one
// before, whenever the stream took a message since the last keeper. The
// dispatchers call it every [KeeperInterval]; each stream holds one
// keeper (two for a moment while one replaces the other).

// KeeperInterval is how often the dispatcher keeps the work-queue
// streams' last blocks (see [Keeper]).
const KeeperInterval = time.Second

// keeperBody is what a keeper says to whoever reads it.
var keeperBody = []byte("AX keeps this stream's last block from emptying: no consumer reads this subject")

// Keeper keeps the last block of one work-queue stream from emptying. It
// is not safe for concurrent use.
type Keeper struct {
	js      jetstream.JetStream
	stream  string
	subject string
	handle  jetstream.Stream
	// seq is the stream sequence of the last keeper this Keeper
	// published or found last in the stream; 0 before the first.
	seq uint64
}

// Keepers returns a Keeper for each work-queue stream of the topology,
// AX_DISPATCH and AX_REPORTS.
func (t Topology) Keepers(js jetstream.JetStream) []*Keeper {
	return []*Keeper{
		{js: js, stream: t.DispatchStream(), subject: t.Keeper(t.DispatchStream())},
		{js: js, stream: t.ReportsStream(), subject: t.Keeper(t.ReportsStream())},
	}
}

// Keep publishes a keeper and purges the earlier ones, unless the
// stream's last message is a keeper (this Keeper's or another
// dispatcher's): then the block it sits in is still the last.
func (k *Keeper) Keep(ctx context.Context) error {
	if k.handle == nil {
		h, err := k.js.Stream(ctx, k.stream)
		if err != nil {
			return fmt.Errorf("keep stream %s: %w", k.stream, err)
		}
		k.handle = h
	} else {
		info, err := k.handle.Info(ctx)
		if err != nil {
			return fmt.Errorf("keep stream %s: %w", k.stream, err)
		}
		if last := info.State.LastSeq; last != k.seq {
			// Another dispatcher's keeper may be last: take it as ours.
			m, err := k.handle.GetLastMsgForSubject(ctx, k.subject)
			if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				return fmt.Errorf("keep stream %s: read its keeper: %w", k.stream, err)
			}
			if err == nil && m.Sequence == last {
				k.seq = last
			}
		}
		if info.State.LastSeq == k.seq {
			return nil
		}
	}
	ack, err := k.js.Publish(ctx, k.subject, keeperBody)
	if err != nil {
		return fmt.Errorf("keep stream %s: publish on %s: %w", k.stream, k.subject, err)
	}
	k.seq = ack.Sequence
	if err := k.handle.Purge(ctx, jetstream.WithPurgeSubject(k.subject), jetstream.WithPurgeKeep(1)); err != nil {
		return fmt.Errorf("keep stream %s: purge the keepers before sequence %d: %w", k.stream, ack.Sequence, err)
	}
	return nil
}

// Held returns how many messages stream holds besides its keeper: for
// AX_DISPATCH and AX_REPORTS, the work that waits; for any other stream,
// all its messages.
func (t Topology) Held(ctx context.Context, stream jetstream.Stream) (uint64, error) {
	subject := t.Keeper(stream.CachedInfo().Config.Name)
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, fmt.Errorf("messages of stream %s: %w", stream.CachedInfo().Config.Name, err)
	}
	return info.State.Msgs - info.State.Subjects[subject], nil
}
