package store

import (
	"bytes"
	"testing"

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
