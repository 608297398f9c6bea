package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/api"
	"github.com/ax-scheduler/ax/api/apitest"
	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/drill"
	"github.com/ax-scheduler/ax/examples/executor/handlers"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// TestConformanceCommand runs ax conformance executor against a Go
// executor with the conformance handlers on the default pool (tasks
// without tags), through a real dispatcher and
// API: it exits 0 with every check passed but the drain, which it did not
// check without --worker-pid; and it refuses a pool no worker serves.
func TestConformanceCommand(t *testing.T) {
	t.Parallel()
	ns := streamstest.NewServer(t, streams.Config{LeaseTTL: 5 * time.Second})
	st := store.New(storetest.NewDB(t))
	dconn, _ := ns.Connect()
	d, err := dispatcher.New(dispatcher.Options{Conn: dconn, Store: st, Streams: streams.Config{LeaseTTL: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Start(t, "dispatcher", d)
	aconn, _ := ns.Connect()
	svc, err := api.New(api.Options{Store: st, Conn: aconn})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	token := apitest.Token(t, st, "conformance", schemas.RoleAdmin)
	mux := executor.NewMux()
	handlers.RegisterConformance(mux, handlers.ConformancePrefix)
	wconn, _ := ns.Connect()
	executortest.Run(t, executor.Options{Conn: wconn, WorkerID: "cli-worker", Mux: mux,
		Logger: slog.New(zerolog.NewSlogHandler(zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)))})

	ax := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(t.Context(), append([]string{"--api", srv.URL, "--token", token, "conformance", "executor",
			"--nats-url", ns.URL, "--wait", "1m"}, args...), strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := ax("--pool", "default", "-o", "json")
	if code != 0 {
		t.Fatalf("ax conformance executor --pool default: exit %d\n%s%s", code, out, errOut)
	}
	var r drill.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if !r.Passed() || len(r.Checks) < 10 {
		t.Errorf("verdict %+v", r)
	}
	for _, c := range r.Checks {
		if c.Name == "drain: on SIGTERM" && !c.Info {
			t.Errorf("the drain was checked without --worker-pid: %+v", c)
		}
	}
	code, _, errOut = ax("--pool", "nobody")
	if code == 0 || !strings.Contains(errOut, "no worker") || !strings.Contains(errOut, "nobody") {
		t.Errorf("a pool no worker serves: exit %d, stderr %q", code, errOut)
	}
}
