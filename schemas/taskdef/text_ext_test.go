package taskdef_test

import (
	"testing"

	"github.com/ax-scheduler/ax/schemas/taskdef"
)

func TestParseTriggerEventRefusesTextPostgreSQLCannotStore(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{`{"payload": "\u0000"}`, `{"event_id": "\ud800"}`, "{\"run_id\": \"\xff\"}", `{"reason": "\u0000"}`} {
		_, err := taskdef.ParseTriggerEvent([]byte(doc))
		if err == nil {
			t.Errorf("ParseTriggerEvent(%q) accepted it", doc)
		}
	}
}
