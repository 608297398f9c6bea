// Command withpg runs a command with TEST_DATABASE_URL pointing at a
// PostgreSQL server:
//
//	go run ./internal/tools/withpg -- go test ./...
//
// When TEST_DATABASE_URL is already set, withpg just runs the command.
// Otherwise it starts a private cluster from the machine's PostgreSQL
// installation (durability off unless -fsync on, on a free loopback port) in
// a fresh folder under the system's temporary folder, sets TEST_DATABASE_URL
// to its postgres database and TEST_DATABASE_LOG to the server's log file,
// runs the command, then stops the cluster and removes the folder — also
// when interrupted with SIGINT or SIGTERM, which it passes on to the
// command. It exits with the command's exit code.
//
// Flags, before the command:
//
//	-fsync on|off     on: production durability (fsync, synchronous_commit,
//	                  full_page_writes on), as the benchmarks run; off (the
//	                  default): a throwaway cluster for tests
//	-set name=value   an extra server setting, repeatable, e.g.
//	                  -set shared_preload_libraries=pg_stat_statements
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/internal/pgcluster"
)

const (
	envURL = "TEST_DATABASE_URL"
	envLog = "TEST_DATABASE_LOG"
)

func main() {
	// Colours only for a terminal, not for CI logs.
	fi, err := os.Stderr.Stat()
	noColor := err != nil || fi.Mode()&os.ModeCharDevice == 0
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly, NoColor: noColor}).
		With().Timestamp().Str("tool", "withpg").Logger()
	os.Exit(run(os.Args[1:], log))
}

// settingsFlag collects repeated -set name=value flags.
type settingsFlag []string

func (f *settingsFlag) String() string { return strings.Join(*f, " ") }

func (f *settingsFlag) Set(v string) error {
	if name, _, ok := strings.Cut(v, "="); !ok || name == "" {
		return fmt.Errorf("%q: want name=value, e.g. shared_preload_libraries=pg_stat_statements", v)
	}
	*f = append(*f, v)
	return nil
}

func run(args []string, log zerolog.Logger) int {
	fs := flag.NewFlagSet("withpg", flag.ContinueOnError)
	fsync := fs.String("fsync", "off", "on: start the cluster with production durability; off: without (tests)")
	var settings settingsFlag
	fs.Var(&settings, "set", "extra server setting name=value (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go run ./internal/tools/withpg [-fsync on|off] [-set name=value]... -- COMMAND [ARG...]\n\n"+
			"Runs COMMAND with "+envURL+" set, starting a private PostgreSQL for it unless "+envURL+" is already set.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	args = fs.Args()
	if *fsync != "on" && *fsync != "off" {
		fmt.Fprintf(os.Stderr, "withpg: -fsync %q: use on or off\n", *fsync)
		return 2
	}
	if len(args) == 0 {
		fs.Usage()
		return 2
	}
	// Take the signals from now on: until the command runs, they stop
	// the start; then they are passed on to it.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	if os.Getenv(envURL) != "" {
		return runCommand(args, sigs, log)
	}

	dir, err := os.MkdirTemp("", "ax-withpg-")
	if err != nil {
		log.Error().Err(err).Msg("create cluster folder")
		return 1
	}
	defer removeDir(dir, log)
	// As root, the cluster runs as user postgres, which must reach dir.
	if err := os.Chmod(dir, 0o755); err != nil {
		log.Error().Err(err).Msg("create cluster folder")
		return 1
	}

	// A signal during the start cancels it; the command never runs.
	ctx, cancel := context.WithCancel(context.Background())
	interrupted, watching := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watching)
		select {
		case <-sigs:
			close(interrupted)
			cancel()
		case <-ctx.Done():
		}
	}()
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Fast: *fsync == "off", Settings: settings, Logger: log})
	cancel()
	<-watching
	if err == nil {
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := cluster.Stop(ctx); err != nil {
				log.Error().Err(err).Msg("stop postgres")
			}
		}()
	}
	select {
	case <-interrupted:
		log.Warn().Msg("interrupted while starting postgres")
		return 130
	default:
	}
	if err != nil {
		msg := "start postgres"
		if errors.Is(err, pgcluster.ErrNotInstalled) {
			msg = "no PostgreSQL to start: install it, or set " + envURL + " to a PostgreSQL 15+ server where you may create databases"
		}
		log.Error().Err(err).Msg(msg)
		return 1
	}

	if err := os.Setenv(envURL, cluster.URL("postgres")); err != nil {
		log.Error().Err(err).Msg("set " + envURL)
		return 1
	}
	if err := os.Setenv(envLog, cluster.LogFile()); err != nil {
		log.Error().Err(err).Msg("set " + envLog)
		return 1
	}
	log.Info().Str("url", pgcluster.Redact(cluster.URL("postgres"))).Str("fsync", *fsync).Strs("settings", settings).Msg("running the command with " + envURL + " set")
	return runCommand(args, sigs, log)
}

// runCommand runs args with the standard streams passed through, passes
// on every signal from sigs, and returns the command's exit code: 128 plus
// the signal's number when a signal ended it, as a shell reports it.
func runCommand(args []string, sigs <-chan os.Signal, log zerolog.Logger) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		log.Error().Err(err).Str("command", args[0]).Msg("run the command")
		return 127
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case sig := <-sigs:
				// A Ctrl-C reaches the command through the terminal
				// too; a second SIGINT is harmless to it.
				_ = cmd.Process.Signal(sig)
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		log.Error().Err(err).Str("command", args[0]).Msg("run the command")
		return 1
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

func removeDir(dir string, log zerolog.Logger) {
	if err := os.RemoveAll(dir); err != nil {
		log.Error().Err(err).Msg("remove cluster folder")
	}
}
