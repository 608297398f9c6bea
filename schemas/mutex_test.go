package schemas

import (
	"strings"
	"testing"
)

func TestParseMutexKeyMissingField(t *testing.T) {
	t.Parallel()
	tmpl, err := ParseMutexKey("order-{{.shop_id}}")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	err = tmpl.Execute(&b, map[string]any{"shop": 1})
	if err == nil || !strings.Contains(err.Error(), `map has no entry for key "shop_id"`) {
		t.Errorf("render without the field: %v, want an error naming shop_id", err)
	}
}
