package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/drill"
	"github.com/ax-scheduler/ax/drill/system"
)

func TestDrillSystemRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--scenario", "executor-kill,nope"}, `--scenario: unknown scenario "nope": choose among [executor-kill`},
		{[]string{"--rate", "0"}, "--rate 0: give 1 to 1000"},
		{[]string{"--duration", "10ms"}, "--duration 10ms: give at least 1s"},
		{[]string{"--lease-ttl", "0s"}, "--lease-ttl 0s: give at least 1s"},
		{[]string{"-o", "csv"}, `--output "csv": use table, json or yaml`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"drill", "system"}, tt.args...), strings.NewReader(""), &stdout, &stderr)
		if code != exitFailed || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("ax drill system %v: exit %d, stderr %q; want exit %d naming %q", tt.args, code, stderr.String(), exitFailed, tt.want)
		}
	}
}

// TestPrintDrillSystemEndsWithTheVerdict pins the last line docs/drill.md
// promises of every drill: PASS: … when every scenario passed, FAIL: and
// the failed checks by scenario otherwise.
func TestPrintDrillSystemEndsWithTheVerdict(t *testing.T) {
	t.Parallel()
	ok := system.Result{Scenario: "a", Checks: []drill.Check{{Name: "lost", Pass: true}}, Pass: true}
	bad := system.Result{Scenario: "b", Checks: []drill.Check{{Name: "lost", Pass: true}, {Name: "stuck", Pass: false}}}
	for _, tt := range []struct {
		results []system.Result
		want    string
	}{
		{[]system.Result{ok}, "PASS: every check passed"},
		{[]system.Result{ok, bad}, "FAIL: b: stuck"},
		{nil, "FAIL: no scenario ran"},
	} {
		for _, all := range []bool{false, true} {
			var out bytes.Buffer
			if err := printDrillSystem(&out, tt.results, all); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if last := lines[len(lines)-1]; last != tt.want {
				t.Errorf("checks %v: last line %q, want %q; printed:\n%s", all, last, tt.want, out.String())
			}
		}
	}
}
