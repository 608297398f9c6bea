package trigger

import (
	"container/heap"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
)

func testSchedule(t *testing.T, expr string) *schedule {
	t.Helper()
	cs, err := taskdef.ParseCronSchedule(expr, "UTC")
	if err != nil {
		t.Fatal(err)
	}
	return &schedule{CronSchedule: cs, zone: "UTC", every: int64(cs.Every())}
}

func ns(s string) int64 {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UnixNano()
}

func strs(ticks []int64) []string {
	out := make([]string, len(ticks))
	for i, t := range ticks {
		out[i] = time.Unix(0, t).UTC().Format(time.RFC3339)
	}
	return out
}

func TestCollectMissed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, expr    string
		first, cutoff string
		keep          int
		count         int64
		exact         bool
		last, next    string
		tail          []string
	}{
		{"every, exact by arithmetic", "@every 100s", "2024-05-01T00:01:40Z", "2024-05-01T00:16:39Z", 2,
			9, true, "2024-05-01T00:15:00Z", "2024-05-01T00:16:40Z",
			[]string{"2024-05-01T00:11:40Z", "2024-05-01T00:13:20Z", "2024-05-01T00:15:00Z"}},
		{"every, fewer than kept", "@every 1m", "2024-05-01T00:01:00Z", "2024-05-01T00:02:00Z", 10,
			2, true, "2024-05-01T00:02:00Z", "2024-05-01T00:03:00Z",
			[]string{"2024-05-01T00:01:00Z", "2024-05-01T00:02:00Z"}},
		{"cron, counted", "0 * * * * *", "2024-05-01T10:04:00Z", "2024-05-01T10:10:29Z", 1,
			7, true, "2024-05-01T10:10:00Z", "2024-05-01T10:11:00Z",
			[]string{"2024-05-01T10:09:00Z", "2024-05-01T10:10:00Z"}},
		{"cron, a day of seconds", "* * * * * *", "2024-05-01T00:00:00Z", "2024-05-01T23:59:59Z", 3,
			86400, false, "2024-05-01T23:59:59Z", "2024-05-02T00:00:00Z",
			[]string{"2024-05-01T23:59:56Z", "2024-05-01T23:59:57Z", "2024-05-01T23:59:58Z", "2024-05-01T23:59:59Z"}},
		{"cron, sparse tail found by widening", "* * 9 * * *", "2024-05-01T09:00:00Z", "2024-05-03T12:00:00Z", 1,
			0, false, "2024-05-03T09:59:59Z", "2024-05-04T09:00:00Z",
			[]string{"2024-05-03T09:59:58Z", "2024-05-03T09:59:59Z"}},
		{"cron, the window meets the ticks counted", "* * * * * *", "2024-05-01T00:00:00Z", "2024-05-01T00:16:50Z", 20,
			1011, true, "2024-05-01T00:16:50Z", "2024-05-01T00:16:51Z",
			seconds("2024-05-01T00:16:30Z", 21)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, next := collectMissed(testSchedule(t, tc.expr), ns(tc.first), ns(tc.cutoff), tc.keep)
			if tc.count != 0 && m.count != tc.count {
				t.Errorf("count = %d, want %d", m.count, tc.count)
			}
			if m.exact != tc.exact {
				t.Errorf("exact = %t, want %t", m.exact, tc.exact)
			}
			if m.first != ns(tc.first) || m.last != ns(tc.last) {
				t.Errorf("first, last = %v, want %s, %s", strs([]int64{m.first, m.last}), tc.first, tc.last)
			}
			if got := strs(m.tail); !slices.Equal(got, tc.tail) {
				t.Errorf("tail = %v, want %v", got, tc.tail)
			}
			if next != ns(tc.next) {
				t.Errorf("next = %v, want %s", strs([]int64{next}), tc.next)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	m := missed{count: 7, exact: true, first: 1, last: 7, tail: []int64{4, 5, 6, 7}}
	for _, tc := range []struct {
		name  string
		e     entry
		fire  []int64
		skip  int64
		first int64
		last  int64
	}{
		{"skip", entry{misfire: misfireSkip}, nil, 7, 1, 7},
		{"fire_once", entry{misfire: misfireFireOnce}, []int64{7}, 6, 1, 6},
		{"catch_up bounded", entry{misfire: misfireCatchUp, maxCatchUp: 3}, []int64{5, 6, 7}, 4, 1, 4},
		{"catch_up all", entry{misfire: misfireCatchUp, maxCatchUp: 10}, []int64{4, 5, 6, 7}, 0, 0, 0},
	} {
		mm := m
		if tc.name == "catch_up all" {
			mm = missed{count: 4, exact: true, first: 4, last: 7, tail: []int64{4, 5, 6, 7}}
		}
		d := decide(&tc.e, mm)
		if !slices.Equal(d.fire, tc.fire) || d.skipped != tc.skip || d.firstSkipped != tc.first || d.lastSkipped != tc.last {
			t.Errorf("%s: decide = %+v, want fire %v, %d skipped from %d to %d", tc.name, d, tc.fire, tc.skip, tc.first, tc.last)
		}
	}
}

func TestHeapOrdersByNextTick(t *testing.T) {
	t.Parallel()
	var h tickHeap
	var entries []*entry
	for _, tick := range []int64{50, 10, 40, 30, 20, 60, 0, never} {
		e := &entry{}
		entries = append(entries, e)
		heap.Push(&h, item{next: tick, e: e})
	}
	if got := h.due(30, nil, 0); len(got) != 4 || got[0].next != 0 || got[3].next != 30 {
		t.Errorf("due(30) = %v, want the items of 0, 10, 20 and 30 in order", got)
	}
	if got := h.due(30, nil, 2); len(got) != 2 {
		t.Errorf("due(30) with a limit of 2 = %v", got)
	}
	heap.Remove(&h, int(entries[2].index)) // 40
	h[entries[4].index].next = 55          // 20 moves back
	heap.Fix(&h, int(entries[4].index))
	var got []int64
	for h.Len() > 0 {
		it := heap.Pop(&h).(item)
		if it.e.index != -1 {
			t.Errorf("a popped entry keeps index %d", it.e.index)
		}
		got = append(got, it.next)
	}
	if want := []int64{0, 10, 30, 50, 55, 60, never}; !slices.Equal(got, want) {
		t.Errorf("popped %v, want %v", got, want)
	}
}

// seconds returns n ticks a second apart from from, as RFC 3339.
func seconds(from string, n int) []string {
	var out []string
	t, _ := time.Parse(time.RFC3339, from)
	for i := range n {
		out = append(out, t.Add(time.Duration(i)*time.Second).Format(time.RFC3339))
	}
	return out
}

func TestEncodeEventIsJSONMarshal(t *testing.T) {
	t.Parallel()
	at := time.Date(2024, 5, 1, 2, 0, 0, 0, time.UTC)
	for _, ev := range []schemas.TriggerEvent{
		{EventID: schemas.CronEventID("nightly-report", 3, at), Task: "nightly-report", Source: schemas.SourceCron, FiredAt: at},
		{EventID: "cron:x:0:2024-05-01T02:00:00Z", Task: "x", Source: schemas.SourceCron, FiredAt: at.Add(time.Nanosecond)},
		{EventID: "cron:a<b:0:t", Task: "a<b", Source: schemas.SourceCron, FiredAt: at},
		{EventID: "cron:é\"\\:0:t", Task: "é\"\\", Source: schemas.SourceCron, FiredAt: at},
		{EventID: "cron:x:0:t", Task: "x", Source: schemas.SourceCron, FiredAt: at, Reason: "misfire fire_once: <late> & \"so\""},
	} {
		got, err := encodeEvent(ev)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(ev)
		if string(got) != string(want) {
			t.Errorf("encodeEvent = %s, want %s", got, want)
		}
	}
}
