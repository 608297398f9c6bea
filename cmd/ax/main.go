// Command ax is AX's one binary: every service as a subcommand (ax
// dispatcher, ax executor, ax api, …), ax dev to run them all in one process,
// and the operator CLI (ax task, ax fire, ax instance) that talks to the API.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/ax-scheduler/ax/internal/gctune"
)

// gcSetting is the garbage collector's setting gctune.Apply made at
// start-up; the services log it.
var gcSetting gctune.Setting

func main() {
	gcSetting = gctune.Apply()
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes the command line args and returns the process's exit code:
// 0 on success, the code of an *exitError, or 1 for any other error, which
// it prints to stderr as "ax: <error>".
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "ax: %v\n", err)
	if ee, ok := errors.AsType[*exitError](err); ok {
		return ee.code
	}
	return exitFailed
}

// The exit codes of ax, in one place: ax --help lists them (exitCodesHelp)
// and so does docs/cli.md. Keep the three in step.
const (
	exitOK           = 0 // the command did what it was asked
	exitFailed       = 1 // any error: bad flags, a refusal of the API, the API not reachable
	exitNotSucceeded = 2 // with --wait: an instance ended FAILED, SKIPPED or CANCELLED; ax drill task, ax drill system: a check failed
	exitTimeout      = 3 // with --wait: an instance did not end within --timeout
)

// exitCodesHelp is the exit codes' part of ax --help.
const exitCodesHelp = `Exit codes:
  0  success
  1  any error: bad flags or arguments, a refusal of the API (the message says
     why), or the API could not be reached
  2  with --wait (ax fire, ax instance rerun): an instance ended FAILED, SKIPPED
     or CANCELLED; ax drill task, ax drill system: a check of the verdict
     failed
  3  with --wait: an instance did not end within --timeout`

// exitError is an error that ends ax with a given exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }
