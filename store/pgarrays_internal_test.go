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
	m := pgtype.NewMap()
	for _, in := range [][]string{nil, {}, {""}, {"worker:w-1", "", "ünïcode", "a,b", `q"uote`}} {
		for _, format := range []int16{pgtype.BinaryFormatCode, pgtype.TextFormatCode} {
			want, err := m.Encode(pgtype.TextArrayOID, format, in, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.Encode(pgtype.TextArrayOID, format, textArray(in), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) || (got == nil) != (want == nil) {
				t.Errorf("%q in format %d: encoded %q, a []string %q", in, format, got, want)
			}
		}
	}

	in := make([]string, 100)
	for i := range in {
		in[i] = "worker:w-1"
	}
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := m.Encode(pgtype.TextArrayOID, pgtype.BinaryFormatCode, textArray(in), buf[:0]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs >= float64(len(in)) {
		t.Errorf("encoding %d strings made %.0f allocations", len(in), allocs)
	}
}

// A timeArray encodes as the []*time.Time it holds (a nil element NULL,
// a nil array NULL), without an allocation an element.
func TestTimeArrayEncodesAsTimes(t *testing.T) {
	m := pgtype.NewMap()
	at := time.Date(2026, 12, 2, 23, 10, 0, 123456789, time.FixedZone("x", 3600))
	utc := at.UTC()
	for _, in := range [][]*time.Time{nil, {}, {nil}, {&at, nil, &utc}} {
		for _, format := range []int16{pgtype.BinaryFormatCode, pgtype.TextFormatCode} {
			want, err := m.Encode(pgtype.TimestamptzArrayOID, format, in, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.Encode(pgtype.TimestamptzArrayOID, format, timeArray(in), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) || (got == nil) != (want == nil) {
				t.Errorf("%v in format %d: encoded %q, a []*time.Time %q", in, format, got, want)
			}
		}
	}

	in := make([]*time.Time, 100)
	for i := range in {
		in[i] = &at
	}
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := m.Encode(pgtype.TimestamptzArrayOID, pgtype.BinaryFormatCode, timeArray(in), buf[:0]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs >= float64(len(in)) {
		t.Errorf("encoding %d times made %.0f allocations", len(in), allocs)
	}
}
