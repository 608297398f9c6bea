package main

import (
	"strings"
	"testing"
)

// TestTableAligns pins how ax prints a table: each column as wide as its
// widest cell, two spaces apart, no trailing spaces (not even after an
// empty last cell), one line per row.
func TestTableAligns(t *testing.T) {
	var out strings.Builder
	tw := newTable(&out)
	for _, row := range []string{"ID\tTASK\tSTATE\tERROR", "1\tnightly-report\tSUCCEEDED\t", "12345\tx\tFAILED\tboom"} {
		if _, err := tw.Write([]byte(row + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "ID     TASK            STATE      ERROR\n" +
		"1      nightly-report  SUCCEEDED\n" +
		"12345  x               FAILED     boom\n"
	if out.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	if err := tw.Flush(); err != nil || out.Len() != 0 {
		t.Errorf("a second Flush wrote %q (err %v), want nothing", out.String(), err)
	}
}
