//go:build !unix

package pgcluster

import "os/exec"

// isolate does nothing where there are no process groups.
func isolate(*exec.Cmd) {}
