package natsauth_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// TestDocsGiveTheHeaderTable checks docs/security.md's table of the
// control headers each stream and bucket honours against the streams a
// server holds after Ensure (AllowRollup, AllowMsgSchedules, AllowMsgTTL,
// the duplicate window), and its writers against natsauth's permissions:
// every role that may publish on a stream's subjects, and no other.
func TestDocsGiveTheHeaderTable(t *testing.T) {
	t.Parallel()
	b := newBed(t)
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "### Which headers take effect where")
	if !ok {
		t.Fatal(`docs/security.md has no section "Which headers take effect where"`)
	}
	var header []string
	rows := map[string][]string{}
	for line := range strings.SplitSeq(section, "\n") {
		if strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "| ") {
			if header != nil {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if header == nil {
			header = cells
			continue
		}
		rows[cells[0]] = cells
	}
	top := b.top
	for _, sc := range append(top.StreamConfigs(streams.Config{}), top.BucketStreamConfigs(streams.Config{})...) {
		row, ok := rows[sc.Name]
		if !ok || len(row) != len(header) {
			t.Errorf("docs/security.md's header table has no row of %d cells for %s", len(header), sc.Name)
			continue
		}
		st, err := b.djs.Stream(t.Context(), sc.Name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		for i, col := range header[2:] {
			var honoured bool
			switch col {
			case "`Nats-Rollup`":
				honoured = cfg.AllowRollup
			case "`Nats-Schedule*`":
				honoured = cfg.AllowMsgSchedules
			case "`Nats-TTL`":
				honoured = cfg.AllowMsgTTL
			case "`Nats-Msg-Id`":
				honoured = cfg.Duplicates > 0
			case "`Nats-Expected-*`":
				honoured = true
			default:
				t.Fatalf("the header table has a column %s this test does not know", col)
			}
			cell := row[i+2]
			want := map[bool]string{true: "honoured", false: "refused"}[honoured]
			if !strings.HasPrefix(cell, want) {
				t.Errorf("docs/security.md says %s on %s is %q; the stream's configuration makes it %s", col, sc.Name, cell, want)
			}
		}
		var writers []string
		for _, role := range natsauth.Roles {
			if mayPublish(natsauth.Permissions(top, role, string(role), natsauth.MatrixScope), sc.Subjects) {
				writers = append(writers, "`"+string(role)+"`")
			}
		}
		var documented []string
		for _, part := range strings.Split(row[1], "`") {
			if slices.Contains(natsauth.Roles, natsauth.Role(part)) {
				documented = append(documented, "`"+part+"`")
			}
		}
		if !slices.Equal(writers, documented) {
			t.Errorf("docs/security.md says %s is written by %v; the permissions let %v publish there", sc.Name, documented, writers)
		}
	}
}

// mayPublish reports whether p (nil: everything) lets its user publish on
// a subject that one of subjects matches.
func mayPublish(p *server.Permissions, subjects []string) bool {
	if p == nil || p.Publish == nil {
		return true
	}
	for _, allow := range p.Publish.Allow {
		for _, s := range subjects {
			if overlap(strings.Split(allow, "."), strings.Split(s, ".")) {
				return true
			}
		}
	}
	return false
}

// overlap reports whether some subject matches both patterns a and b.
func overlap(a, b []string) bool {
	switch {
	case len(a) == 0 || len(b) == 0:
		return len(a) == 0 && len(b) == 0
	case a[0] == ">" || b[0] == ">":
		return true
	case a[0] == "*" || b[0] == "*" || a[0] == b[0]:
		return overlap(a[1:], b[1:])
	}
	return false
}
