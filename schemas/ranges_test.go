package schemas

import (
	"encoding/json"
	"testing"
	"time"
)

// TestRangesJSON pins the JSON the API answers and reads for backfills,
// bulk queries and dead-letter groups: the store and the API's client
// share these types, so a renamed tag would change the wire.
func TestRangesJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    any
		want string
	}{
		{Backfill{ID: 1, Task: "t", From: at, To: at, State: BackfillRunning, CreatedAt: at, UpdatedAt: at},
			`{"id":1,"task":"t","trigger_index":0,"from":"2026-03-01T00:00:00Z","to":"2026-03-01T00:00:00Z","priority":"","max_running":0,"overlap":"","rate":0,"state":"running","fired":0,"existing":0,"skipped":0,"total":0,"operator":"","created_at":"2026-03-01T00:00:00Z","updated_at":"2026-03-01T00:00:00Z"}`},
		{Backfill{Cursor: at, Instances: map[State]int{StateSucceeded: 2}},
			`{"id":0,"task":"","trigger_index":0,"from":"0001-01-01T00:00:00Z","to":"0001-01-01T00:00:00Z","priority":"","max_running":0,"overlap":"","rate":0,"state":"","cursor":"2026-03-01T00:00:00Z","fired":0,"existing":0,"skipped":0,"total":0,"operator":"","created_at":"0001-01-01T00:00:00Z","updated_at":"0001-01-01T00:00:00Z","instances":{"SUCCEEDED":2}}`},
		{InstanceQuery{}, `{}`},
		{InstanceQuery{Task: "t", State: []State{StateFailed}, Since: at, Until: at, Error: "e", Worker: "w", ErrorClass: "c"},
			`{"task":"t","state":["FAILED"],"since":"2026-03-01T00:00:00Z","until":"2026-03-01T00:00:00Z","error":"e","worker":"w","error_class":"c"}`},
		{DeadLetterGroup{Task: "t", ErrorClass: "c", Count: 3, FirstSeen: at, LastSeen: at, Example: "x", LatestID: 9},
			`{"task":"t","error_class":"c","count":3,"first_seen":"2026-03-01T00:00:00Z","last_seen":"2026-03-01T00:00:00Z","example":"x","latest_id":9}`},
	} {
		got, err := json.Marshal(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("%T JSON\n got %s\nwant %s", tc.v, got, tc.want)
		}
	}
}
