package importer_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/importer"
)

// TestCompareTicks pairs ticks with runs: on time within the tolerance,
// late before the next tick, else extra and missing.
func TestCompareTicks(t *testing.T) {
	t.Parallel()
	at := func(m, s int) time.Time { return time.Date(2026, 3, 2, 10, m, s, 0, time.UTC) }
	ticks := []time.Time{at(0, 0), at(15, 0), at(30, 0), at(45, 0)}
	runs := []time.Time{at(0, 1), at(7, 0), at(20, 0), at(45, 5)}
	got := importer.CompareTicks(ticks, runs, 5*time.Second)
	want := []importer.ShadowDiff{
		{Kind: importer.ShadowMissing, Ran: at(7, 0)},
		{Kind: importer.ShadowLate, Tick: at(15, 0), Ran: at(20, 0)},
		{Kind: importer.ShadowExtra, Tick: at(30, 0)},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CompareTicks = %+v, want %+v", got, want)
	}
	if id, ok := importer.XXLJobID("xxl-12-ledgerhandler"); !ok || id != 12 {
		t.Errorf("XXLJobID = %d, %v", id, ok)
	}
}
