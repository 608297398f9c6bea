package schemas_test

import (
	"reflect"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
)

func TestTextProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		doc    string
		fields []string // the paths named, in order
	}{
		{`{"a": "plain", "b": [1, true, null, {"c": "é 😀 \u00e9 \ud83d\ude00 \\u0000"}]}`, nil},
		{`"\u0000"`, []string{""}},
		{`{"payload": {"note": "a\u0000b"}}`, []string{"payload.note"}},
		{`{"payload": {"k\u0000": 1}}`, []string{"payload.k"}},
		{`{"event_id": "\ud800", "run_id": "x\udc00y"}`, []string{"event_id", "run_id"}},
		{`{"e": "\ud800\u0041"}`, []string{"e"}},
		{"{\"e\": \"\xff\", \"f\": [\"ok\", \"\xc3\"]}", []string{"e", "f[1]"}},
		{`{"e": "\u0000 and \u0000", "f": "\ud83d\ude00"}`, []string{"e"}},
	}
	for _, tt := range tests {
		var got []string
		for _, p := range schemas.TextProblems([]byte(tt.doc)) {
			got = append(got, p.Field)
			if p.Message == "" {
				t.Errorf("%s: problem at %q without a message", tt.doc, p.Field)
			}
		}
		if !reflect.DeepEqual(got, tt.fields) {
			t.Errorf("TextProblems(%s) names %q, want %q", tt.doc, got, tt.fields)
		}
	}
}
