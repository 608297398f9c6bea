package taskdef_test

import (
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/schemas/taskdef"
)

func TestParseTaskRedact(t *testing.T) {
	base := `{"task_name":"t","execution":{"handler":"h"},"redact":%s}`
	if _, err := taskdef.ParseTask([]byte(strings.Replace(base, "%s", `["card.number","/items/*/iban"]`, 1))); err != nil {
		t.Fatalf("valid redact refused: %v", err)
	}
	for in, want := range map[string]string{
		`["card.number",""]`:                   "redact[1]",
		`["ok","a..b"]`:                        "redact[1]: \"a..b\" has an empty segment",
		`["/"]`:                                "redact[0]: \"/\" names the whole value",
		`["/a~2b"]`:                            "redact[0]",
		`["a","a"]`:                            "redact[1]: \"a\" is listed twice",
		`"card.number"`:                        "redact",
		`["` + strings.Repeat("a", 300) + `"]`: "redact[0]",
	} {
		_, err := taskdef.ParseTask([]byte(strings.Replace(base, "%s", in, 1)))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("redact %s: %v; want an error with %q", in, err, want)
		}
	}
}
