package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
)

// TestCodecKeyFile fires with --codec-key-file: AX_FIRINGS holds only the
// envelope; ax instance get with the key shows the payload and the output
// (encoded as an executor with the key would) decoded, and without it the
// envelopes. A field a task's redact names shows as the marker.
func TestCodecKeyFile(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	key := bytes.Repeat([]byte{3}, 32)
	keyFile := filepath.Join(t.TempDir(), "codec.keys")
	if err := os.WriteFile(keyFile, []byte("# test\ncli-k1 "+base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	codec, err := schemas.NewAESGCM(schemas.CodecKey{ID: "cli-k1", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	e.apply("task_name: vault\nexecution: {handler: h}\nredact: [note]\n")
	const secret, outSecret = "SECRET-CARD-4111", "SECRET-RECEIPT"
	if code, out, errOut := e.ax("", "fire", "vault", "--codec-key-file", keyFile, "--event-id", "ev-codec",
		"--payload", `{"card":"`+secret+`"}`); code != 0 {
		t.Fatalf("fire: exit %d\n%s%s", code, out, errOut)
	}
	data := e.lastMsg("ax.fire.vault.api")
	if bytes.Contains(data, []byte(secret)) {
		t.Fatalf("AX_FIRINGS holds the plaintext: %s", data)
	}
	ev, err := taskdef.ParseTriggerEvent(data)
	if err != nil {
		t.Fatal(err)
	}
	if env, ok := schemas.ParseEnvelope(ev.Payload); !ok || env.KeyID != "cli-k1" {
		t.Fatalf("the firing's payload %s is not an envelope of cli-k1", ev.Payload)
	}
	// The instance the dispatcher makes, with the output an executor with the key reports.
	output, err := codec.Encode(json.RawMessage(`{"receipt":"` + outSecret + `","note":"internal"}`))
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := e.pool.QueryRow(context.WithoutCancel(t.Context()), `
		INSERT INTO instances (task, task_version, event_id, source, state, attempt, max_attempts, priority, pool, handler,
			timeout_ms, worker_id, fired_at, payload, output)
		VALUES ('vault', 1, 'ev-codec', 'manual', 'SUCCEEDED', 1, 1, 'normal', 'default', 'h', 60000, 'w-1', now(), $1, $2)
		RETURNING id`, []byte(ev.Payload), []byte(output)).Scan(&id); err != nil {
		t.Fatal(err)
	}

	out := e.mustAx("instance", "get", fmt.Sprint(id), "--codec-key-file", keyFile)
	for _, want := range []string{`PAYLOAD   {"card":"` + secret + `"}`, `"receipt":"` + outSecret + `"`} {
		if !strings.Contains(out, want) {
			t.Errorf("instance get with the key lacks %q:\n%s", want, out)
		}
	}
	// redact applies to what the API holds: the envelope, which shows nothing.
	out = e.mustAx("instance", "get", fmt.Sprint(id))
	if strings.Contains(out, secret) || strings.Contains(out, outSecret) || !strings.Contains(out, `"ax_codec":"aes-gcm/v1"`) {
		t.Errorf("instance get without the key:\n%s", out)
	}
	if code, _, errOut := e.ax("", "instance", "get", fmt.Sprint(id), "--codec-key-file", filepath.Join(t.TempDir(), "missing")); code == 0 ||
		!strings.Contains(errOut, "--codec-key-file") {
		t.Errorf("a missing key file: exit %d, %s", code, errOut)
	}

	// A plaintext payload's redacted field shows as the marker.
	plain := e.insertInstance("vault", "ev-plain", schemas.StateFailed, "")
	if _, err := e.pool.Exec(context.WithoutCancel(t.Context()), `UPDATE instances SET payload = '{"note":"hide-me","n":1}' WHERE id = $1`, plain); err != nil {
		t.Fatal(err)
	}
	out = e.mustAx("instance", "get", fmt.Sprint(plain))
	if !strings.Contains(out, `PAYLOAD   {"n":1,"note":"`+schemas.RedactedMarker+`"}`) || strings.Contains(out, "hide-me") {
		t.Errorf("instance get of a redacted payload:\n%s", out)
	}
}
