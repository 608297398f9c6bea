package store

import (
	"bytes"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// A textArray encodes as the []string it holds, NULL for nil, without an
// allocation an element.
func TestTextArrayEncodesAsStrings(t *testing.T) {
	for _, in := range [][]string{nil, {}, {""}, {"worker:w-1", "", "ünïcode", "a,b", `q"uote`}} {
		encodesAs(t, pgtype.TextArrayOID, textArray(in), in)
	}
	in := make([]string, 100)
	for i := range in {
		in[i] = "worker:w-1"
	}
	fewAllocations(t, pgtype.TextArrayOID, textArray(in), len(in))
}

// A timeArray encodes as the []*time.Time it holds (a nil element NULL,
// a nil array NULL), without an allocation an element.
func TestTimeArrayEncodesAsTimes(t *testing.T) {
	at := time.Date(2026, 12, 2, 23, 10, 0, 123456789, time.FixedZone("x", 3600))
	utc := at.UTC()
	for _, in := range [][]*time.Time{nil, {}, {nil}, {&at, nil, &utc}} {
		encodesAs(t, pgtype.TimestamptzArrayOID, timeArray(in), in)
	}
	in := make([]*time.Time, 100)
	for i := range in {
		in[i] = &at
	}
	fewAllocations(t, pgtype.TimestamptzArrayOID, timeArray(in), len(in))
}

// encodesAs checks that got encodes as want, the slice pgx takes as it
// is, in both formats.
func encodesAs(t *testing.T, oid uint32, got, want any) {
	t.Helper()
	m := pgtype.NewMap()
	for _, format := range []int16{pgtype.BinaryFormatCode, pgtype.TextFormatCode} {
		w, err := m.Encode(oid, format, want, nil)
		if err != nil {
			t.Fatal(err)
		}
		g, err := m.Encode(oid, format, got, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(g, w) || (g == nil) != (w == nil) {
			t.Errorf("%v in format %d: encoded %q, as pgx encodes it %q", want, format, g, w)
		}
	}
}

// fewAllocations checks that encoding array, of n elements, makes fewer
// allocations than one an element.
func fewAllocations(t *testing.T, oid uint32, array any, n int) {
	t.Helper()
	m := pgtype.NewMap()
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := m.Encode(oid, pgtype.BinaryFormatCode, array, buf[:0]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs >= float64(n) {
		t.Errorf("encoding %d elements made %.0f allocations", n, allocs)
	}
}
