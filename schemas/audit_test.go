package schemas

import "testing"

func TestAuditIDs(t *testing.T) {
	t.Parallel()
	if got := TransitionAuditID(42); got != "t-42" {
		t.Errorf("TransitionAuditID(42) = %q", got)
	}
	if got := ActionAuditID(7); got != "o-7" {
		t.Errorf("ActionAuditID(7) = %q", got)
	}
	for _, tt := range []struct {
		in   string
		kind AuditKind
		id   int64
		ok   bool
	}{
		{"t-42", AuditTransition, 42, true},
		{"o-7", AuditAction, 7, true},
		{"t-9223372036854775807", AuditTransition, 9223372036854775807, true},
		{"t-9223372036854775808", "", 0, false},
		{"t-0", "", 0, false},
		{"t--1", "", 0, false},
		{"t-+1", "", 0, false},
		{"t-01", "", 0, false},
		{"t-", "", 0, false},
		{"x-1", "", 0, false},
		{"t1", "", 0, false},
		{"T-1", "", 0, false},
		{"", "", 0, false},
	} {
		kind, id, ok := ParseAuditID(tt.in)
		if kind != tt.kind || id != tt.id || ok != tt.ok {
			t.Errorf("ParseAuditID(%q) = %q, %d, %t; want %q, %d, %t", tt.in, kind, id, ok, tt.kind, tt.id, tt.ok)
		}
	}
}

// FuzzParseAuditID feeds ParseAuditID arbitrary ids, as a relay reads them
// from the last message of AX_AUDIT: an id it accepts is one it would make.
func FuzzParseAuditID(f *testing.F) {
	for _, s := range []string{"t-1", "o-42", "t-0", "x-1", "t-+1", "t-01", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		kind, id, ok := ParseAuditID(s)
		if !ok {
			return
		}
		want := TransitionAuditID(id)
		if kind == AuditAction {
			want = ActionAuditID(id)
		}
		if id <= 0 || (kind != AuditTransition && kind != AuditAction) {
			t.Fatalf("ParseAuditID(%q) = %q, %d", s, kind, id)
		}
		if want != s {
			t.Fatalf("ParseAuditID(%q) accepted an id it would write as %q", s, want)
		}
	})
}
