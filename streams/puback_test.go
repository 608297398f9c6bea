package streams

import (
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/internal/natsembed"
)

// pubAckSeeds are answers of the shape nats-server writes, and their
// neighbours.
var pubAckSeeds = []string{
	`{"stream":"AX_DISPATCH","seq":1}`,
	`{"stream":"KV_ax-leases","seq":18446744073709551615}`,
	`{"stream":"KV_ax-leases","seq":18446744073709551616}`,
	`{"stream":"AX_TRIGGERS","seq":7,"duplicate":true}`,
	`{"stream":"AX_TRIGGERS","domain":"hub","seq":7,"duplicate":false}`,
	`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"KV_ax-leases","seq":0}`,
	`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"X","seq":0}`,
	`{"error":{"code":-1,"err_code":65536}}`,
	`{"error":null,"stream":"X","seq":1}`,
	`{"error":{"code":1},"error":{"err_code":2}}`,
	`{"type":"io.nats.jetstream.api.v1.pub_ack","stream":"X","seq":1}`,
	`{"type":5,"stream":"X","seq":1}`,
	`{"Stream":"X","SEQ":2}`,
	`{"stream":"X","seq":1,"batch":"b","count":3,"val":"12","extra":[1,{"a":null},true,-0,"s"]}`,
	`{"stream":"X","seq":1.0}`,
	`{"stream":"X","seq":-1}`,
	`{"stream":"X","seq":01}`,
	`{"stream":"X\u0041","seq":1}`,
	` { "stream" : "X" , "seq" : 1 } `,
	`{"stream":"X","seq":1}x`,
	`{"stream":"X","seq":1,}`,
	`{}`, `[]`, `null`, ``, `{"seq":1}`,
}

// FuzzParsePubAck holds parsePubAck to encoding/json decoding into the
// jetstream client's reply shape: the same acknowledgement or error for
// every input, and an error for the same inputs.
func FuzzParsePubAck(f *testing.F) {
	for _, s := range pubAckSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkPubAck(t, []byte(s))
	})
}

func checkPubAck(t *testing.T, data []byte) {
	t.Helper()
	got, gotErr := parsePubAck(data, func(b []byte) string { return string(b) })
	var want pubAckJSON
	wantErr := json.Unmarshal(data, &want)
	if (gotErr != nil) != (wantErr != nil) {
		t.Fatalf("parsePubAck(%q): error %v, encoding/json's %v", data, gotErr, wantErr)
	}
	if wantErr != nil {
		return
	}
	var wantAck jetstream.PubAck
	if want.PubAck != nil {
		wantAck = *want.PubAck
	}
	if got.ack != wantAck || !reflect.DeepEqual(got.err, want.Error) {
		t.Fatalf("parsePubAck(%q) = %+v, %+v; encoding/json: %+v, %+v", data, got.ack, got.err, wantAck, want.Error)
	}
}

// TestParsePubAckOnServerAnswers reads what nats-server answers to
// publishes (an acknowledgement, a duplicate, the wrong last sequence of
// a create-only KV write, a full stream) with the quick path and checks
// it against encoding/json.
func TestParsePubAckOnServerAnswers(t *testing.T) {
	t.Parallel()
	srv, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"},
		Duplicates: time.Minute, MaxMsgs: 3, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
	ask := func(subject string, hdr nats.Header) []byte {
		t.Helper()
		reply, err := nc.RequestMsg(&nats.Msg{Subject: subject, Header: hdr, Data: []byte("x")}, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return reply.Data
	}
	answers := map[string][]byte{
		"ack":       ask("t.a", nats.Header{jetstream.MsgIDHeader: {"1"}}),
		"duplicate": ask("t.a", nats.Header{jetstream.MsgIDHeader: {"1"}}),
		"expected":  ask("t.b", nats.Header{jetstream.ExpectedLastSubjSeqHeader: {"0"}}),
		"wrong last sequence": ask("t.b",
			nats.Header{jetstream.ExpectedLastSubjSeqHeader: {"0"}}),
	}
	ask("t.c", nil)
	answers["full"] = ask("t.d", nil)
	for name, data := range answers {
		checkPubAck(t, data)
		r, _ := fastPubAck(data, func(b []byte) string { return string(b) })
		if r.ack.Stream != "T" {
			t.Errorf("%s: %s: the quick path did not read it (%+v)", name, data, r)
		}
	}
	for name, want := range map[string]jetstream.ErrorCode{
		"wrong last sequence": jetstream.JSErrCodeStreamWrongLastSequence,
		"full":                10077,
	} {
		r, _ := fastPubAck(answers[name], func(b []byte) string { return string(b) })
		if r.err == nil || r.err.ErrorCode != want {
			t.Errorf("%s: %s: error %+v, want err_code %d", name, answers[name], r.err, want)
		}
	}
	if r, _ := fastPubAck(answers["duplicate"], func(b []byte) string { return string(b) }); !r.ack.Duplicate {
		t.Errorf("duplicate: %s: not read as one", answers["duplicate"])
	}
	for name, data := range answers {
		t.Logf("%s: %s", name, strconv.Quote(string(data)))
	}
}

// TestParsePubAckAllocates nothing for an acknowledgement whose stream
// name is interned.
func TestParsePubAckAllocates(t *testing.T) {
	data := []byte(`{"stream":"AX_DISPATCH","seq":123456,"duplicate":true}`)
	name := "AX_DISPATCH"
	intern := func(b []byte) string {
		if string(b) == name {
			return name
		}
		return string(b)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := parsePubAck(data, intern); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("parsePubAck allocates %v times an acknowledgement", n)
	}
}
