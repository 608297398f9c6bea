package schemas_test

import (
	"encoding/json"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
)

func TestRedact(t *testing.T) {
	payload := json.RawMessage(`{"card":{"number":"4111","exp":"12/29"},"items":[{"iban":"DE1","n":1},{"iban":"DE2","n":2}],"a/b":"x","plain":3}`)
	for _, tc := range []struct {
		paths []string
		want  string
	}{
		{[]string{"card.number"}, `{"a/b":"x","card":{"exp":"12/29","number":"[redacted]"},"items":[{"iban":"DE1","n":1},{"iban":"DE2","n":2}],"plain":3}`},
		{[]string{"/card"}, `{"a/b":"x","card":"[redacted]","items":[{"iban":"DE1","n":1},{"iban":"DE2","n":2}],"plain":3}`},
		{[]string{"items.*.iban", "/a~1b"}, `{"a/b":"[redacted]","card":{"exp":"12/29","number":"4111"},"items":[{"iban":"[redacted]","n":1},{"iban":"[redacted]","n":2}],"plain":3}`},
		{[]string{"/items/1/n"}, `{"a/b":"x","card":{"exp":"12/29","number":"4111"},"items":[{"iban":"DE1","n":1},{"iban":"DE2","n":"[redacted]"}],"plain":3}`},
		{[]string{"missing.path", "plain.deeper"}, string(payload)}, // unchanged, byte for byte
	} {
		got := schemas.Redact(payload, schemas.RedactPaths(tc.paths))
		if string(got) != tc.want {
			t.Errorf("Redact(%v) =\n%s\nwant\n%s", tc.paths, got, tc.want)
		}
	}
	if got := schemas.Redact(json.RawMessage(`"top"`), schemas.RedactPaths([]string{"a"})); string(got) != `"top"` {
		t.Errorf("redact of a string = %s", got)
	}
}
