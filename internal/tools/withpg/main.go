// Command withpg runs a command with TEST_DATABASE_URL pointing at a
// PostgreSQL server:
//
//	go run ./internal/tools/withpg -- go test ./...
//
// When TEST_DATABASE_URL is already set, withpg just runs the command.
// Otherwise it starts a private cluster from the machine's PostgreSQL
// installation (durability off, on a free loopback port) in a fresh folder
// under the system's temporary folder, sets TEST_DATABASE_URL to its
// postgres database, runs the command, then stops the cluster and removes
// the folder — also when interrupted with SIGINT or SIGTERM, which it passes
// on to the command. It exits with the command's exit code.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/internal/pgcluster"
)

const envURL = "TEST_DATABASE_URL"

func main() {
	// Colours only for a terminal, not for CI logs.
	fi, err := os.Stderr.Stat()
	noColor := err != nil || fi.Mode()&os.ModeCharDevice == 0
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly, NoColor: noColor}).
		With().Timestamp().Str("tool", "withpg").Logger()
	os.Exit(run(os.Args[1:], log))
}

func run(args []string, log zerolog.Logger) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: go run ./internal/tools/withpg -- COMMAND [ARG...]\n\n"+
			"Runs COMMAND with "+envURL+" set, starting a private PostgreSQL for it unless "+envURL+" is already set.")
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
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Fast: true, Logger: log})
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
	log.Info().Str("url", cluster.URL("postgres")).Msg("running the command with " + envURL + " set")
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
