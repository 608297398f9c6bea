package main

import (
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// TestServicesRequireNATSCredentials: every service refuses to start
// without NATS credentials unless --require-nats-auth=false says it is
// meant (issue 24: it only warned, and a server that lets anyone in lets
// anyone publish firings, read payloads and delete the streams). The
// refusal names the flag and the credentials to set; nothing connects.
func TestServicesRequireNATSCredentials(t *testing.T) {
	t.Parallel()
	ns := streamstest.NewServer(t, streams.Config{})
	before := ns.Server.NumClients()
	for _, svc := range []string{"dispatcher", "trigger", "executor", "api", "auditor"} {
		args := []string{svc, "--nats-url", ns.URL, "--log-level", "error"}
		if svc != "executor" {
			args = append(args, "--database-url", "postgres://ax@127.0.0.1:1/ax")
		}
		code, _, errOut := axRun(t, args...)
		for _, want := range []string{"no NATS credentials", "NATS_CREDS", "NATS_NKEY", "NATS_USER", "--require-nats-auth=false"} {
			if code != 1 || !strings.Contains(errOut, want) {
				t.Errorf("ax %s without NATS credentials: exit %d, stderr %q; want exit 1 naming %s", svc, code, errOut, want)
				break
			}
		}
	}
	if n := ns.Server.NumClients(); n != before {
		t.Errorf("%d clients on the server after the refusals, %d before", n, before)
	}
	// Turned off, the check lets the service go on: to the database here,
	// which is not there.
	code, _, errOut := axRun(t, "trigger", "--require-nats-auth=false", "--nats-url", ns.URL,
		"--database-url", "postgres://ax@127.0.0.1:1/ax", "--log-level", "error")
	if code == 0 || strings.Contains(errOut, "no NATS credentials") {
		t.Errorf("ax trigger --require-nats-auth=false: exit %d, stderr %q; want it past the credential check", code, errOut)
	}
}
