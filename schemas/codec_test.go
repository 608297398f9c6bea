package schemas_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
)

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func TestAESGCMRoundTrip(t *testing.T) {
	old, err := schemas.NewAESGCM(schemas.CodecKey{ID: "k1", Key: testKey(1)})
	if err != nil {
		t.Fatal(err)
	}
	// The rotated ring encodes with k2 and still reads k1.
	ring, err := schemas.NewAESGCM(schemas.CodecKey{ID: "k2", Key: testKey(2)}, schemas.CodecKey{ID: "k1", Key: testKey(1)})
	if err != nil {
		t.Fatal(err)
	}
	plain := json.RawMessage(`{"card":{"number":"4111-1111"}}`)
	sealed, err := old.Encode(plain)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("4111")) {
		t.Fatalf("envelope %s holds the plaintext", sealed)
	}
	env, ok := schemas.ParseEnvelope(sealed)
	if !ok || env.Codec != schemas.CodecAESGCM || env.KeyID != "k1" {
		t.Fatalf("envelope %s: parsed %+v, %v", sealed, env, ok)
	}
	if raw, _ := base64.StdEncoding.DecodeString(env.Data); len(raw) != 12+len(plain)+16 {
		t.Fatalf("data is %d bytes; want nonce 12 + %d + tag 16", len(raw), len(plain))
	}
	got, err := ring.Decode(sealed)
	if err != nil || string(got) != string(plain) {
		t.Fatalf("decode = %s, %v; want %s", got, err, plain)
	}
	again, _ := old.Encode(plain)
	if bytes.Equal(again, sealed) {
		t.Fatal("two encodings of one value are equal: the nonce is not random")
	}
	// Plaintext passes through; no payload stays none.
	if got, err := ring.Decode(plain); err != nil || string(got) != string(plain) {
		t.Fatalf("decode of plaintext = %s, %v", got, err)
	}
	if got, err := ring.Encode(nil); err != nil || got != nil {
		t.Fatalf("encode of nothing = %s, %v", got, err)
	}
}

func TestAESGCMRefuses(t *testing.T) {
	k1, _ := schemas.NewAESGCM(schemas.CodecKey{ID: "k1", Key: testKey(1)})
	other, _ := schemas.NewAESGCM(schemas.CodecKey{ID: "k1", Key: testKey(9)})
	k3, _ := schemas.NewAESGCM(schemas.CodecKey{ID: "k3", Key: testKey(3)})
	sealed, _ := k1.Encode(json.RawMessage(`"secret"`))
	var env schemas.Envelope
	_ = json.Unmarshal(sealed, &env)
	raw, _ := base64.StdEncoding.DecodeString(env.Data)
	raw[len(raw)-1] ^= 1
	env.Data = base64.StdEncoding.EncodeToString(raw)
	tampered, _ := json.Marshal(env)
	for _, tc := range []struct {
		name  string
		codec *schemas.AESGCM
		data  string
		want  string
	}{
		{"unknown key id", k3, string(sealed), "no key with that id"},
		{"another key, same id", other, string(sealed), "does not open it"},
		{"tampered", k1, string(tampered), "does not open it"},
		{"other codec", k1, `{"ax_codec":"rot13/v1","key_id":"k1","data":"x"}`, "reads aes-gcm/v1 only"},
		{"bad base64", k1, `{"ax_codec":"aes-gcm/v1","key_id":"k1","data":"!!"}`, "not the base64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.codec.Decode(json.RawMessage(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("decode: %v; want an error with %q", err, tc.want)
			}
		})
	}
	for _, k := range []schemas.CodecKey{{ID: "k1", Key: []byte("short")}, {ID: "bad id", Key: testKey(1)}} {
		if _, err := schemas.NewAESGCM(k); err == nil {
			t.Errorf("NewAESGCM(%q, %d bytes) took it", k.ID, len(k.Key))
		}
	}
}

func TestParseCodecKeys(t *testing.T) {
	k := base64.StdEncoding.EncodeToString(testKey(1))
	keys, err := schemas.ParseCodecKeys(strings.NewReader("# keys\n\nnew " + k + "\nold " + k + "\n"))
	if err != nil || len(keys) != 2 || keys[0].ID != "new" || !bytes.Equal(keys[1].Key, testKey(1)) {
		t.Fatalf("keys = %+v, %v", keys, err)
	}
	for in, want := range map[string]string{
		"":                  "no key",
		"k1\n":              "line 1",
		"# c\nk1 not*b64\n": "line 2",
	} {
		if _, err := schemas.ParseCodecKeys(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCodecKeys(%q) = %v; want an error with %q", in, err, want)
		}
	}
}

func TestEncodedPayloadProblems(t *testing.T) {
	c, _ := schemas.NewAESGCM(schemas.CodecKey{ID: "k1", Key: testKey(1)})
	sealed, _ := c.Encode(json.RawMessage(`{"shop_id":7}`))
	for _, tc := range []struct {
		name    string
		def     schemas.Task
		payload json.RawMessage
		fields  []string
	}{
		{"plain task", schemas.Task{TaskName: "t"}, sealed, nil},
		{"constant mutex", schemas.Task{TaskName: "t", Concurrency: schemas.Concurrency{MutexKey: "nightly"}}, sealed, nil},
		{"schema, plaintext", schemas.Task{TaskName: "t", PayloadSchema: json.RawMessage(`{"type":"object"}`)}, json.RawMessage(`{"shop_id":7}`), nil},
		{"schema", schemas.Task{TaskName: "t", PayloadSchema: json.RawMessage(`{"type":"object"}`)}, sealed, []string{"payload_schema"}},
		{"hash and mutex", schemas.Task{TaskName: "t",
			Dispatch:    schemas.DispatchPolicy{Strategy: schemas.DispatchHash, HashKey: "{{.shop_id}}"},
			Concurrency: schemas.Concurrency{MutexKey: "shop-{{.shop_id}}"}}, sealed, []string{"dispatch.hash_key", "concurrency.mutex_key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := schemas.EncodedPayloadProblems(&tc.def, tc.payload)
			if len(ps) != len(tc.fields) {
				t.Fatalf("problems = %v; want ones naming %v", ps, tc.fields)
			}
			for i, p := range ps {
				if p.Field != "payload" || !strings.Contains(p.Message, tc.fields[i]) || !strings.Contains(p.Message, "key_id k1") {
					t.Errorf("problem %d = %v; want one naming %s and the key id", i, p, tc.fields[i])
				}
			}
		})
	}
}

// BenchmarkAESGCM measures what the codec adds per payload on each side:
// one Encode in the firing client (or per output in the executor), one
// Decode in the executor (or the reading client), for a 1 KiB payload.
func BenchmarkAESGCM(b *testing.B) {
	c, err := schemas.NewAESGCM(schemas.CodecKey{ID: "k1", Key: testKey(1)})
	if err != nil {
		b.Fatal(err)
	}
	plain := json.RawMessage(`{"blob":"` + strings.Repeat("x", 1000) + `"}`)
	sealed, _ := c.Encode(plain)
	b.Run("encode-1KiB", func(b *testing.B) {
		b.SetBytes(int64(len(plain)))
		for b.Loop() {
			if _, err := c.Encode(plain); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode-1KiB", func(b *testing.B) {
		b.SetBytes(int64(len(plain)))
		for b.Loop() {
			if _, err := c.Decode(sealed); err != nil {
				b.Fatal(err)
			}
		}
	})
}
