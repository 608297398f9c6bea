package schemas

// HandlerShell is the name of the shell handler (package executor/shell):
// it runs [ShellPayload.Command] with /bin/sh -c. An executor serves it
// only when its operator enabled it (ax executor --enable-shell).
const HandlerShell = "builtin.shell"

// ShellPayload is the payload of a [HandlerShell] task: what an imported
// crontab line runs, and how.
type ShellPayload struct {
	// Command is the shell command line, run as /bin/sh -c Command (or
	// Shell -c Command).
	Command string `json:"command"`
	// Stdin is written to the command's standard input (crontab's text
	// after the first unescaped %); empty gives it an empty input.
	Stdin string `json:"stdin,omitempty"`
	// Env is the command's environment on top of the handler's base
	// (PATH=/usr/bin:/bin, HOME, LOGNAME, USER and SHELL of its user), as
	// cron gives a job the variables its crontab sets.
	Env map[string]string `json:"env,omitempty"`
	// Dir is the working directory (default the user's home directory).
	Dir string `json:"dir,omitempty"`
	// User is the account the command runs as; the executor must run as
	// root to switch to it. Empty runs it as the executor's own user.
	User string `json:"user,omitempty"`
	// Shell replaces /bin/sh (crontab's SHELL=); it is run as Shell -c.
	Shell string `json:"shell,omitempty"`
}
