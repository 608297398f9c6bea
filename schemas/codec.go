package schemas

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// PayloadCodec turns payloads and outputs into opaque JSON envelopes and
// back, on the side of the scheduler that holds the key: the client that
// fires (the CLI, the API client) and the executor that runs the handler.
// The scheduler stores and relays the envelopes as they are and never holds
// the key. An implementation must be safe for concurrent use.
type PayloadCodec interface {
	// Encode returns the envelope of a JSON value. An empty value stays
	// empty: no payload is still no payload.
	Encode(plain json.RawMessage) (json.RawMessage, error)
	// Decode returns the JSON value an envelope holds. A value that is not
	// an envelope (see [ParseEnvelope]) is returned as it is, so a codec
	// reads plaintext payloads too; an envelope it cannot open is an error
	// that names its codec and key id.
	Decode(data json.RawMessage) (json.RawMessage, error)
}

// CodecAESGCM is the name of the AES-GCM codec in an envelope's ax_codec.
const CodecAESGCM = "aes-gcm/v1"

// Envelope is the JSON shape of an encoded payload or output:
//
//	{"ax_codec": "aes-gcm/v1", "key_id": "k2026", "data": "<base64>"}
//
// For aes-gcm/v1, data is the standard base64 (with padding) of a 12-byte
// random nonce followed by the AES-GCM sealing of the plaintext JSON bytes
// (ciphertext and 16-byte tag), with no additional data; the key is the one
// the key id names, 16, 24 or 32 bytes (AES-128, -192, -256). docs/security.md
// describes it for workers written in other languages.
type Envelope struct {
	Codec string `json:"ax_codec"`
	KeyID string `json:"key_id"`
	Data  string `json:"data"`
}

// ParseEnvelope reports whether data is an envelope: a JSON object with a
// non-empty string ax_codec, and returns it. It is cheap for values that are
// not (it looks for the ax_codec key before decoding).
func ParseEnvelope(data json.RawMessage) (Envelope, bool) {
	t := bytes.TrimSpace(data)
	if len(t) == 0 || t[0] != '{' || !bytes.Contains(t, []byte(`"ax_codec"`)) {
		return Envelope{}, false
	}
	var env Envelope
	if err := json.Unmarshal(t, &env); err != nil || env.Codec == "" {
		return Envelope{}, false
	}
	return env, true
}

// String names the envelope for messages: "ax_codec aes-gcm/v1, key_id k1".
func (e Envelope) String() string { return "ax_codec " + e.Codec + ", key_id " + e.KeyID }

// AESGCM is a [PayloadCodec] with a key ring: it encodes with its first key
// and decodes with whichever key an envelope names, so keys can rotate
// (add the new key first, keep the old ones until no payload needs them).
type AESGCM struct {
	encodeID string
	keys     map[string]cipher.AEAD
}

var keyIDRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// CodecKey is one key of an [AESGCM] ring.
type CodecKey struct {
	// ID names the key in envelopes: 1-64 letters, digits, '_', '.' or '-'.
	ID string
	// Key is 16, 24 or 32 bytes.
	Key []byte
}

// NewAESGCM returns the codec of keys, which encodes with keys[0].
func NewAESGCM(keys ...CodecKey) (*AESGCM, error) {
	if len(keys) == 0 {
		return nil, errors.New("aes-gcm codec: no key; give at least one")
	}
	c := &AESGCM{encodeID: keys[0].ID, keys: make(map[string]cipher.AEAD, len(keys))}
	for _, k := range keys {
		if !keyIDRE.MatchString(k.ID) {
			return nil, fmt.Errorf("aes-gcm codec: key id %q: use 1-64 letters, digits, '_', '.' or '-'", k.ID)
		}
		if _, dup := c.keys[k.ID]; dup {
			return nil, fmt.Errorf("aes-gcm codec: key id %q appears twice; give each key its own id", k.ID)
		}
		block, err := aes.NewCipher(k.Key)
		if err != nil {
			return nil, fmt.Errorf("aes-gcm codec: key %q is %d bytes; an AES key is 16, 24 or 32 bytes (make one with: head -c 32 /dev/urandom | base64)", k.ID, len(k.Key))
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("aes-gcm codec: key %q: %w", k.ID, err)
		}
		c.keys[k.ID] = aead
	}
	return c, nil
}

// ParseCodecKeys reads a key file: one key a line, "<key id> <base64 key>",
// the first the one that encodes; blank lines and lines starting with '#'
// are skipped. Errors name the line.
func ParseCodecKeys(r io.Reader) ([]CodecKey, error) {
	var keys []CodecKey
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want \"<key id> <base64 key>\", e.g. \"k2026 $(head -c 32 /dev/urandom | base64)\"", n)
		}
		key, err := base64.StdEncoding.DecodeString(fields[1])
		if err != nil {
			return nil, fmt.Errorf("line %d: key %q is not standard base64: %v", n, fields[0], err)
		}
		keys = append(keys, CodecKey{ID: fields[0], Key: key})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, errors.New("no key in the file; add a line \"<key id> <base64 of 32 random bytes>\"")
	}
	return keys, nil
}

// Encode seals plain with the first key.
func (c *AESGCM) Encode(plain json.RawMessage) (json.RawMessage, error) {
	plain = bytes.TrimSpace(plain)
	if len(plain) == 0 {
		return nil, nil
	}
	if !json.Valid(plain) {
		return nil, errors.New("aes-gcm codec: encode: the value is not valid JSON")
	}
	aead := c.keys[c.encodeID]
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("aes-gcm codec: encode: nonce: %w", err)
	}
	sealed := aead.Seal(nonce, nonce, plain, nil)
	return json.Marshal(Envelope{Codec: CodecAESGCM, KeyID: c.encodeID, Data: base64.StdEncoding.EncodeToString(sealed)})
}

// Decode opens an aes-gcm/v1 envelope with the key it names; a value that
// is no envelope is returned as it is.
func (c *AESGCM) Decode(data json.RawMessage) (json.RawMessage, error) {
	env, ok := ParseEnvelope(data)
	if !ok {
		return data, nil
	}
	if env.Codec != CodecAESGCM {
		return nil, fmt.Errorf("decode envelope (%s): this codec reads %s only", env, CodecAESGCM)
	}
	aead, ok := c.keys[env.KeyID]
	if !ok {
		return nil, fmt.Errorf("decode envelope (%s): no key with that id in the key ring; add it to the key file", env)
	}
	sealed, err := base64.StdEncoding.DecodeString(env.Data)
	if err != nil || len(sealed) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("decode envelope (%s): data is not the base64 of a nonce and a sealed value", env)
	}
	plain, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], nil)
	if err != nil {
		return nil, fmt.Errorf("decode envelope (%s): the key does not open it (another key under the same id, or the data was changed)", env)
	}
	return plain, nil
}

// EncodedPayloadProblems lists why the scheduler cannot take an encoded
// payload for the task def: what the task asks the scheduler to read in
// the payload (its payload_schema, a dispatch.hash_key or
// concurrency.mutex_key template with an action) it cannot read in an
// envelope. It is nil for a plaintext payload and for a task that reads
// nothing in it.
func EncodedPayloadProblems(def *Task, payload json.RawMessage) []Problem {
	if def == nil {
		return nil
	}
	s := bytes.TrimSpace(def.PayloadSchema)
	reads := (len(s) > 0 && !bytes.Equal(s, []byte("null"))) ||
		strings.Contains(def.Dispatch.HashKey, "{{") || strings.Contains(def.Concurrency.MutexKey, "{{")
	if !reads {
		return nil
	}
	env, ok := ParseEnvelope(payload)
	if !ok {
		return nil
	}
	var problems []Problem
	refuse := func(field, what string) {
		problems = append(problems, Problem{"payload", fmt.Sprintf(
			"is encoded (%s) and the scheduler never holds the key, so it cannot read the payload for task %q's %s %s; fire that task's payloads in plaintext, or remove %s from the task",
			env, def.TaskName, field, what, field)})
	}
	if len(s) > 0 && !bytes.Equal(s, []byte("null")) {
		refuse("payload_schema", "to check it")
	}
	if strings.Contains(def.Dispatch.HashKey, "{{") {
		refuse("dispatch.hash_key", "to route it")
	}
	if strings.Contains(def.Concurrency.MutexKey, "{{") {
		refuse("concurrency.mutex_key", "to render its mutex key")
	}
	return problems
}
