package taskdef

import (
	"errors"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
)

func TestParseTaskMutexKey(t *testing.T) {
	t.Parallel()
	accepts := []string{"order-{{.shop_id}}", "nightly-report", `shop-{{.shop.id}}-{{index .regions 0}}`}
	for _, key := range accepts {
		def := "task_name: t\nexecution:\n  handler: h\nconcurrency:\n  mutex_key: '" + key + "'\n"
		task, err := ParseTask([]byte(def))
		if err != nil {
			t.Errorf("mutex_key %q: %v", key, err)
			continue
		}
		if task.Concurrency.MutexKey != key {
			t.Errorf("mutex_key %q parsed as %q", key, task.Concurrency.MutexKey)
		}
	}
	rejects := []struct{ key, want string }{
		{"order-{{.shop_id", `concurrency.mutex_key: must be a Go text/template over the payload, such as "order-{{.shop_id}}": mutex_key:1: unclosed action`},
		{"order-{{lookup .shop_id}}", `function "lookup" not defined`},
		{"", "concurrency.mutex_key"},
		{strings.Repeat("k", 257), "concurrency.mutex_key"},
	}
	for _, tt := range rejects {
		def := "task_name: t\nexecution:\n  handler: h\nconcurrency:\n  mutex_key: '" + tt.key + "'\n"
		_, err := ParseTask([]byte(def))
		var verr *schemas.ValidationError
		if !errors.As(err, &verr) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("mutex_key %q: error %v, want a validation error containing %q", tt.key, err, tt.want)
		}
	}
}
