//go:build unix

package pgcluster

import (
	"os/exec"
	"syscall"
	"time"
)

// isolate puts cmd in a process group of its own, so that the server it may
// start does not get the terminal's Ctrl-C, and makes a cancelled context
// end the whole group: the program behind runuser or su too, not only cmd.
// SIGTERM lets initdb remove what it made and a starting server shut down.
func isolate(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
}
