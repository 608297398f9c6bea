package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/rs/zerolog"
)

// codecKey is the key the tests' client and executor share; the scheduler
// never gets it.
var codecKey = schemas.CodecKey{ID: "test-k1", Key: bytes.Repeat([]byte{7}, 32)}

func testCodec(t testing.TB) *schemas.AESGCM {
	t.Helper()
	c, err := schemas.NewAESGCM(codecKey)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// streamHolds reports the subjects of the messages of stream that hold text.
func (s *system) streamHolds(stream, text string) []string {
	s.t.Helper()
	ctx := context.Background()
	st, err := s.js.Stream(ctx, stream)
	if err != nil {
		s.t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	var found []string
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted (a schedule that fired, an acked work-queue message)
		}
		if bytes.Contains(m.Data, []byte(text)) {
			found = append(found, m.Subject)
		}
	}
	return found
}

// pgHolds reports which columns of the instance's row hold text.
func (s *system) pgHolds(id int64, text string) []string {
	s.t.Helper()
	var payload, output string
	if err := s.pool.QueryRow(context.Background(), `SELECT COALESCE(payload::text, ''), COALESCE(output::text, '') FROM instances WHERE id = $1`, id).
		Scan(&payload, &output); err != nil {
		s.t.Fatal(err)
	}
	var found []string
	if strings.Contains(payload, text) {
		found = append(found, "payload "+payload)
	}
	if strings.Contains(output, text) {
		found = append(found, "output "+output)
	}
	return found
}

// TestCodecKeepsPayloadsOpaque fires a payload encoded by the API client's
// codec to a worker that holds the key: the handler sees the plaintext,
// while PostgreSQL, AX_TRIGGERS and AX_REPORTS hold only envelopes of the
// payload and of the output, which the client decodes.
func TestCodecKeepsPayloadsOpaque(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	const secret, outSecret = "4111-1111-1111-1111", "tok_live_secret"
	var (
		mu   sync.Mutex
		seen []string
	)
	mux := executor.NewMux()
	mux.Handle("test.charge", executor.JSON(func(_ context.Context, _ *executor.Job, p struct {
		Card string `json:"card"`
	}) (any, error) {
		mu.Lock()
		seen = append(seen, p.Card)
		mu.Unlock()
		return map[string]string{"charge_token": outSecret}, nil
	}))
	conn, _ := s.srv.Connect()
	executortest.Run(t, executor.Options{Conn: conn, WorkerID: "w-codec", Mux: mux, Slots: 2, Logger: slog.New(zerolog.NewSlogHandler(s.log)), Codec: testCodec(t)})
	s.apply("task_name: charge\nexecution: {handler: test.charge}\n")

	client := apiclient.NewClient(s.apiURL, nil)
	client.Token, client.Codec = s.admin, testCodec(t)
	res, err := client.Fire(context.Background(), "charge", wire.FireRequest{Payload: json.RawMessage(`{"card":"` + secret + `"}`), IdempotencyKey: "charge-1"})
	if err != nil {
		t.Fatal(err)
	}
	s.waitState(res.InstanceID, schemas.StateSucceeded, 30*time.Second)

	mu.Lock()
	if len(seen) != 1 || seen[0] != secret {
		t.Errorf("the handler saw cards %q; want [%q]", seen, secret)
	}
	mu.Unlock()
	for _, text := range []string{secret, outSecret} {
		if found := s.pgHolds(res.InstanceID, text); len(found) > 0 {
			t.Errorf("PostgreSQL holds %q in plaintext: %s", text, found)
		}
		for _, stream := range []string{s.srv.Topology.TriggersStream(), s.srv.Topology.FiringsStream(), s.srv.Topology.ReportsStream(), s.srv.Topology.AuditStream()} {
			if found := s.streamHolds(stream, text); len(found) > 0 {
				t.Errorf("%s holds %q in plaintext on %v", stream, text, found)
			}
		}
	}
	raw, err := s.store.GetInstance(context.Background(), res.InstanceID)
	if err != nil {
		t.Fatal(err)
	}
	for what, v := range map[string]json.RawMessage{"payload": raw.Payload, "output": raw.Output} {
		if env, ok := schemas.ParseEnvelope(v); !ok || env.KeyID != codecKey.ID {
			t.Errorf("stored %s %s is not an envelope of key %s", what, v, codecKey.ID)
		}
	}
	if found := s.streamHolds(s.srv.Topology.FiringsStream(), `"ax_codec":"aes-gcm/v1"`); len(found) == 0 {
		t.Errorf("AX_FIRINGS holds no envelope: the firing went elsewhere")
	}

	// The client with the key reads the plaintext back; without it, the envelope.
	in, err := client.GetInstance(context.Background(), res.InstanceID)
	if err != nil {
		t.Fatal(err)
	}
	if compactJSON(in.Payload) != `{"card":"`+secret+`"}` || compactJSON(in.Output) != `{"charge_token":"`+outSecret+`"}` {
		t.Errorf("decoded instance: payload %s, output %s", in.Payload, in.Output)
	}
	if in, _ := s.client.GetInstance(context.Background(), res.InstanceID); bytes.Contains(in.Payload, []byte(secret)) {
		t.Errorf("a client without the key read the payload %s", in.Payload)
	}
	// A retry with the same key and plaintext (a new envelope) is the same firing.
	again, err := client.Fire(context.Background(), "charge", wire.FireRequest{Payload: json.RawMessage(`{"card":"` + secret + `"}`), IdempotencyKey: "charge-1"})
	if err != nil || again.InstanceID != res.InstanceID || !again.Existing {
		t.Errorf("fire again with the idempotency key = %+v, %v; want instance %d, existing", again, err, res.InstanceID)
	}
	if _, err := client.Fire(context.Background(), "charge", wire.FireRequest{Payload: json.RawMessage(`{"card":"other"}`), IdempotencyKey: "charge-1"}); err == nil {
		t.Error("the idempotency key with another payload was taken")
	}
}

// TestCodecRefusals: what the scheduler would have to read in an encoded
// payload is refused at the API, and recorded as SKIPPED for a plain NATS
// publish; a worker without the key fails the attempt permanently, saying so.
func TestCodecRefusals(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	mux := builtinsMux()
	s.executor("w-nokey", mux, 2) // no codec
	s.apply("task_name: checked\nexecution: {handler: builtin.echo}\npayload_schema: {type: object}\n")
	s.apply("task_name: pinned\nexecution: {handler: builtin.echo}\ndispatch: {strategy: hash, hash_key: '{{.shop}}'}\nconcurrency: {mutex_key: 'shop-{{.shop}}'}\n")
	s.apply("task_name: opaque\nexecution: {handler: builtin.echo, retry: {max_attempts: 3, initial_interval_sec: 0}}\n")
	sealed, err := testCodec(t).Encode(json.RawMessage(`{"shop":"s1"}`))
	if err != nil {
		t.Fatal(err)
	}
	for task, fields := range map[string][]string{"checked": {"payload_schema"}, "pinned": {"dispatch.hash_key", "concurrency.mutex_key"}} {
		_, err := s.client.Fire(context.Background(), task, wire.FireRequest{Payload: sealed})
		e, ok := errors.AsType[*wire.Error](err)
		if !ok || e.Status != 422 || e.Code != "encoded_payload" {
			t.Fatalf("fire %s with an envelope: %v; want 422 encoded_payload", task, err)
		}
		for _, f := range fields {
			if !strings.Contains(e.Message, f) || !strings.Contains(e.Message, "key_id "+codecKey.ID) {
				t.Errorf("fire %s: %q does not name %s and the key id", task, e.Message, f)
			}
		}
	}
	s.publish("checked", fmt.Sprintf(`{"event_id":"nats-1","payload":%s}`, sealed))
	in := s.awaitEvent("checked", "nats-1")
	in = s.waitState(in.ID, schemas.StateSkipped, 30*time.Second)
	if !strings.Contains(in.Transitions[len(in.Transitions)-1].Reason, "payload_schema") {
		t.Errorf("the SKIPPED reason %q does not name payload_schema", in.Transitions[len(in.Transitions)-1].Reason)
	}

	id := s.fire("opaque", sealed)
	in = s.waitState(id, schemas.StateFailed, 30*time.Second)
	if in.Attempt != 1 || !strings.Contains(in.Error, "no codec") || !strings.Contains(in.Error, "key_id "+codecKey.ID) {
		t.Errorf("a worker without the key: attempt %d, error %q; want one permanent failure saying it has no codec", in.Attempt, in.Error)
	}
}
