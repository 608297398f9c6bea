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
)

func main() {
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
		return 0
	}
	fmt.Fprintf(stderr, "ax: %v\n", err)
	if ee, ok := errors.AsType[*exitError](err); ok {
		return ee.code
	}
	return 1
}

// exitError is an error that ends ax with a given exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }
