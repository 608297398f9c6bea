package executor

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// TestPublishFinals checks how the sender packs the final reports queued
// while it was busy: one batch per pool on the pool's batch subject, with
// an id of its own; a pool's lone report on its attempt's subject, with the
// report's id; a batch never over the server's max payload.
func TestPublishFinals(t *testing.T) {
	srv := streamstest.NewServer(t, streams.Config{})
	nc, js := srv.Connect()
	top := srv.Topology
	r := newReporter(Options{Conn: nc, Topology: top, WorkerID: "w1"}, slog.New(slog.DiscardHandler))
	r.js, r.nonce = js, "n0nce"
	queue := func(id int64, pool string, output string) *queuedFinal {
		d := &schemas.Dispatch{InstanceID: id, Attempt: 1, Pool: pool}
		rep := schemas.Report{InstanceID: id, Attempt: 1, WorkerID: "w1", Kind: schemas.ReportSucceeded,
			At: time.Now(), StartedAt: time.Now(), Output: json.RawMessage(`"` + output + `"`)}
		data, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		return &queuedFinal{d: d, kind: rep.Kind, data: data, done: make(chan error, 1)}
	}
	// Two reports of 40 % of the max payload fit in one batch, a third
	// does not.
	big := strings.Repeat("x", int(nc.MaxPayload())*2/5)
	queued := []*queuedFinal{queue(1, "", "a"), queue(2, "gpu", "b"), queue(3, schemas.DefaultPool, "c"),
		queue(4, "eu", big), queue(5, "eu", big), queue(6, "eu", big)}
	r.publishFinals(queued)
	for _, q := range queued {
		if err := <-q.done; err != nil {
			t.Errorf("instance %d: %v", q.d.InstanceID, err)
		}
	}

	type stored struct {
		subject, msgID string
		ids            []int64
	}
	// The reads cross the server: a minute, not jetstream's default 5 s,
	// which a loaded machine's make test exceeded.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	stream, err := js.Stream(ctx, top.ReportsStream())
	if err != nil {
		t.Fatal(err)
	}
	var got []stored
	for seq := uint64(1); ; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			t.Fatal(err)
		}
		st := stored{subject: m.Subject, msgID: m.Header.Get(streams.HeaderMsgID)}
		if _, _, ok := top.ReportBatchFrom(m.Subject); ok {
			var b schemas.ReportBatch
			if err := json.Unmarshal(m.Data, &b); err != nil {
				t.Fatalf("batch on %s: %v", m.Subject, err)
			}
			for _, r := range b.Reports {
				st.ids = append(st.ids, r.InstanceID)
			}
		} else {
			var r schemas.Report
			if err := json.Unmarshal(m.Data, &r); err != nil {
				t.Fatalf("report on %s: %v", m.Subject, err)
			}
			st.ids = []int64{r.InstanceID}
		}
		got = append(got, st)
	}
	want := []stored{
		{top.ReportBatch(schemas.DefaultPool, "w1"), "batch-1-n0nce", []int64{1, 3}},
		{top.Report("gpu", "w1", 2), "2-1-final-n0nce", []int64{2}},
		{top.ReportBatch("eu", "w1"), "batch-2-n0nce", []int64{4, 5}},
		{top.Report("eu", "w1", 6), "6-1-final-n0nce", []int64{6}},
	}
	if len(got) != len(want) {
		t.Fatalf("stored %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].subject != want[i].subject || got[i].msgID != want[i].msgID || !slices.Equal(got[i].ids, want[i].ids) {
			t.Errorf("message %d: %+v, want %+v", i+1, got[i], want[i])
		}
	}
}
