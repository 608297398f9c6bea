package streams_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/internal/cpustat"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// keeperSystem is a NATS server on file storage with AX's topology, a
// pool consumer on AX_DISPATCH, and the directory its blocks are in.
type keeperSystem struct {
	top    streams.Topology
	js     jetstream.JetStream
	stream jetstream.Stream
	queue  jetstream.Consumer
	blocks string // AX_DISPATCH's block files
}

func startKeeperSystem(tb testing.TB) *keeperSystem {
	tb.Helper()
	dir := tb.TempDir()
	js := startJSAt(tb, dir)
	top := streams.Default()
	ctx := tb.Context()
	if err := top.Ensure(ctx, js, streams.Config{}); err != nil {
		tb.Fatal(err)
	}
	ks := &keeperSystem{top: top, js: js}
	var err error
	if ks.stream, err = js.Stream(ctx, top.DispatchStream()); err != nil {
		tb.Fatal(err)
	}
	if ks.queue, err = ks.stream.CreateOrUpdateConsumer(ctx, top.PoolConsumer(schemas.DefaultPool, schemas.PriorityNormal, "h")); err != nil {
		tb.Fatal(err)
	}
	matches, err := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", top.DispatchStream(), "msgs"))
	if err != nil || len(matches) != 1 {
		tb.Fatalf("the block directory of %s: %v, %v", top.DispatchStream(), matches, err)
	}
	ks.blocks = matches[0]
	return ks
}

// cycle publishes one attempt to the pool's queue, takes it and acks it.
func (ks *keeperSystem) cycle(tb testing.TB) {
	ctx := tb.Context()
	if _, err := ks.js.Publish(ctx, ks.top.Dispatch(schemas.DefaultPool, schemas.PriorityNormal, "h"), []byte("attempt")); err != nil {
		tb.Fatal(err)
	}
	batch, err := ks.queue.Fetch(1)
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for msg := range batch.Messages() {
		if string(msg.Data()) != "attempt" {
			tb.Fatalf("the queue delivered %q on %s, want the attempt", msg.Data(), msg.Subject())
		}
		if err := msg.DoubleAck(ctx); err != nil {
			tb.Fatal(err)
		}
		n++
	}
	if n != 1 || batch.Error() != nil {
		tb.Fatalf("the queue delivered %d attempts (%v), want 1", n, batch.Error())
	}
}

// blockFiles names AX_DISPATCH's block files.
func (ks *keeperSystem) blockFiles(tb testing.TB) []string {
	entries, err := os.ReadDir(ks.blocks)
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".blk") {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestKeeperKeepsTheLastBlock acks, one by one, attempts that each leave
// AX_DISPATCH empty, as a low rate does: without a keeper the server
// replaces the stream's block file for each; with one the block stays, and
// no consumer is given the keeper.
func TestKeeperKeepsTheLastBlock(t *testing.T) {
	t.Parallel()
	const cycles = 20
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keeper=%v", keep), func(t *testing.T) {
			ks := startKeeperSystem(t)
			keeper := ks.top.Keepers(ks.js)[0]
			if keep {
				if err := keeper.Keep(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			ks.cycle(t)
			first := ks.blockFiles(t)
			for range cycles {
				ks.cycle(t)
			}
			last := ks.blockFiles(t)
			if kept := slices.Equal(first, last); kept != keep {
				t.Errorf("block files %v after the first attempt and %v after %d more, want them the same: %v",
					first, last, cycles, keep)
			}
		})
	}
}

// TestKeeperPublishesOnlyAfterMessages: Keep publishes a keeper when the
// stream took a message since the last keeper, and then only one is left;
// two dispatchers' Keepers do not replace each other's keeper.
func TestKeeperPublishesOnlyAfterMessages(t *testing.T) {
	t.Parallel()
	ks := startKeeperSystem(t)
	ctx := t.Context()
	keeper := ks.top.Keepers(ks.js)[0]
	state := func() (last uint64, keepers uint64) {
		t.Helper()
		info, err := ks.stream.Info(ctx, jetstream.WithSubjectFilter(ks.top.Keeper(ks.top.DispatchStream())))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq, info.State.Subjects[ks.top.Keeper(ks.top.DispatchStream())]
	}
	if err := keeper.Keep(ctx); err != nil {
		t.Fatal(err)
	}
	last, n := state()
	if err := keeper.Keep(ctx); err != nil {
		t.Fatal(err)
	}
	if again, m := state(); again != last || m != 1 || n != 1 {
		t.Errorf("a second Keep with no message between: last sequence %d then %d, keepers %d then %d; want one keeper, published once",
			last, again, n, m)
	}
	ks.cycle(t)
	if err := keeper.Keep(ctx); err != nil {
		t.Fatal(err)
	}
	if after, m := state(); after != last+2 || m != 1 {
		t.Errorf("Keep after an attempt: last sequence %d (was %d), %d keepers; want a new keeper, the one before purged", after, last, m)
	}
	// A second dispatcher's Keeper puts its first keeper; then neither
	// replaces the other's while the stream takes nothing.
	other := ks.top.Keepers(ks.js)[0]
	if err := other.Keep(ctx); err != nil {
		t.Fatal(err)
	}
	last, _ = state()
	for range 3 {
		for _, k := range []*streams.Keeper{keeper, other} {
			if err := k.Keep(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if after, m := state(); after != last || m != 1 {
		t.Errorf("two Keepers with no message between: last sequence %d (was %d), %d keepers; want one keeper, not replaced",
			after, last, m)
	}
}

// BenchmarkWorkQueueAck publishes an attempt, fetches it and acks it, one
// at a time, on AX_DISPATCH in file storage (in the test's temporary
// directory): each ack leaves the stream empty, as at a low rate, with and
// without a keeper. It reports this process's CPU (server and client) per
// cycle.
func BenchmarkWorkQueueAck(b *testing.B) {
	for _, keep := range []bool{false, true} {
		b.Run(fmt.Sprintf("keeper=%v", keep), func(b *testing.B) {
			ks := startKeeperSystem(b)
			if keep {
				if err := ks.top.Keepers(ks.js)[0].Keep(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
			before, err := cpustat.Self()
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				ks.cycle(b)
			}
			b.StopTimer()
			after, err := cpustat.Self()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(after.Sub(before).CPU.Microseconds())/float64(b.N), "cpu_us/op")
		})
	}
}
