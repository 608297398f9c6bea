// Command executor is an example executor: a program of your own that links
// AX's executor SDK, as `ax executor` does, and serves the built-in handlers
// plus the handlers of examples/ that AX does not ship (see package
// [github.com/ax-scheduler/ax/examples/executor/handlers]). Beside `ax dev`,
// which runs its own executor for the default pool, run it as the dev
// executor user:
//
//	go run ./examples/executor --ax-dev .ax --worker-id backup-host-1
//
// (backup-host-1 is the worker examples/pinned-worker.yaml names.)
// --ax-dev connects as the worker's own NATS user, which ax dev keeps in
// <dir>/nats-workers.json: it makes those of the worker ids example-1 (the
// default), example-2, example-3 and backup-host-1; add another with
// ax user add executor --ax-dev. Against another installation it
// takes the NATS CLI's environment names: NATS_URL, NATS_USER,
// NATS_PASSWORD, NATS_CREDS, NATS_INBOX_PREFIX.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"

	"github.com/ax-scheduler/ax/examples/executor/handlers"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/streams"
)

// version is high enough for examples/routing.yaml's min_worker_version.
const version = "1.4.0"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "executor:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		natsURL  = flag.String("nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server URL (env NATS_URL)")
		user     = flag.String("nats-user", os.Getenv("NATS_USER"), "NATS user (env NATS_USER; password in NATS_PASSWORD)")
		creds    = flag.String("nats-creds", os.Getenv("NATS_CREDS"), "NATS credentials file (env NATS_CREDS)")
		inbox    = flag.String("nats-inbox-prefix", os.Getenv("NATS_INBOX_PREFIX"), "inbox prefix of the NATS user (env NATS_INBOX_PREFIX)")
		devDir   = flag.String("ax-dev", "", "data folder of a running ax dev (.ax): connect as the worker's user it made (worker id default example-1)")
		prefix   = flag.String("prefix", envOr("AX_PREFIX", streams.DefaultPrefix), "subject prefix of the installation (env AX_PREFIX)")
		workerID = flag.String("worker-id", os.Getenv("AX_WORKER_ID"), "worker id (default <hostname>-<random>; env AX_WORKER_ID)")
		pools    = flag.String("pool", "default", "pools to serve, comma-separated")
		slots    = flag.Int("slots", 16, "attempts run at once")
	)
	flag.Parse()
	password := os.Getenv("NATS_PASSWORD")
	if *devDir != "" {
		if *workerID == "" {
			*workerID = "example-1"
		}
		u, p, err := devUser(*devDir, *workerID)
		if err != nil {
			return err
		}
		*user, password, *inbox = u, p, "_INBOX_"+u
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	opts := []nats.Option{nats.Name("ax example executor"), nats.MaxReconnects(-1)}
	if *creds != "" {
		opts = append(opts, nats.UserCredentials(*creds))
	}
	if *user != "" {
		opts = append(opts, nats.UserInfo(*user, password))
	}
	if *inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(*inbox))
	}
	nc, err := nats.Connect(*natsURL, opts...)
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", *natsURL, err)
	}
	defer nc.Close()
	top, err := streams.NewTopology(*prefix)
	if err != nil {
		return err
	}

	mux := executor.NewMux()
	executor.RegisterBuiltins(mux)
	handlers.Register(mux)
	svc, err := executor.New(executor.Options{
		Conn: nc, Topology: top, WorkerID: *workerID, Pools: strings.Split(*pools, ","), Slots: *slots,
		Version: version, Mux: mux, Logger: log,
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info("example executor running; Ctrl-C stops it", "handlers", mux.Names(), "pools", *pools)
	return svc.Run(ctx)
}

// devUser reads the NATS user of worker that ax dev keeps in
// <dir>/nats-workers.json, and its password.
func devUser(dir, worker string) (string, string, error) {
	path := filepath.Join(dir, "nats-workers.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return "", "", fmt.Errorf("--ax-dev %s: %w (start ax dev first, or give the folder it keeps its data in)", dir, err)
	}
	var users []struct{ Name, Password string }
	if err := json.Unmarshal(data, &users); err != nil {
		return "", "", fmt.Errorf("--ax-dev %s: read %s: %w", dir, path, err)
	}
	for _, u := range users {
		if u.Name == "executor-"+worker {
			return u.Name, u.Password, nil
		}
	}
	return "", "", errors.New("--ax-dev " + dir + ": " + path + " has no user for worker " + worker +
		": use --worker-id example-1, example-2, example-3 or backup-host-1, or add one with ax user add executor --ax-dev " + dir +
		" --pool default --worker " + worker + " --handler NAME (each handler it serves)")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
