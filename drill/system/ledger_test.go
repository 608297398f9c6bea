package system

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadLedger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	if runs, err := ReadLedger(path); err != nil || len(runs) != 0 {
		t.Fatalf("a ledger not written yet: %v, %v; want no runs, no error", runs, err)
	}
	lines := "start 7 1 w1 100\nstart 8 1 w2 110\nend 7 1 w1 200\nstart 8 1 w3 300\nend 8 1 w3 400\nstart 9 1 w1 500\ncancel 9 1 w1 600\n"
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	runs, err := ReadLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 4 {
		t.Fatalf("%d runs, want 4: %+v", len(runs), runs)
	}
	// Instance 8's attempt 1 ran twice: on w2, which never ended it, and on w3.
	if runs[0].End.UnixNano() != 200 || !runs[1].End.IsZero() || runs[1].Worker != "w2" || runs[2].End.UnixNano() != 400 || runs[2].Cancelled ||
		runs[3].End.UnixNano() != 600 || !runs[3].Cancelled {
		t.Errorf("runs %+v: want 7/1 on w1 ended at 200, 8/1 on w2 open, 8/1 on w3 ended at 400, 9/1 on w1 cancelled at 600", runs)
	}
	if err := os.WriteFile(path, []byte("start 7 x w1 100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLedger(path); err == nil {
		t.Error("a line with a bad attempt: no error")
	}
}
