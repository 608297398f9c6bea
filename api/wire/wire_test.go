package wire

import (
	"encoding/json"
	"testing"
)

func TestSameJSON(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		a, b string
		same bool
	}{
		{``, ``, true},
		{``, `null`, true},
		{` null `, `null`, true},
		{`{"a": 1, "b": [1, 2]}`, `{"b":[1,2],"a":1}`, true},
		{`{"a": 1}`, `{"a": 1.0}`, true},
		{`{"a": 100}`, `{"a": 1e2}`, true},
		{`{"a": 1}`, `{"a": "1"}`, false},
		{`{"a": 1}`, `{"a": 1, "b": null}`, false},
		{`[1, 2]`, `[2, 1]`, false},
		{`{"n": 9007199254740993}`, `{"n": 9007199254740992}`, false}, // beyond float64
		{`true`, `true`, true},
		{`"x"`, `"y"`, false},
		{``, `{}`, false},
		{`{"a":`, `{"a":`, false}, // not JSON: never the same
	} {
		if got := SameJSON(json.RawMessage(tt.a), json.RawMessage(tt.b)); got != tt.same {
			t.Errorf("SameJSON(%s, %s) = %t, want %t", tt.a, tt.b, got, tt.same)
		}
	}
}
