package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
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
