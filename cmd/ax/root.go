package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/user"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/internal/buildinfo"
	"github.com/ax-scheduler/ax/schemas"
)

// defaultAPIURL is where ax dev and ax api listen by default.
const defaultAPIURL = "http://127.0.0.1:8080"

// cli holds the persistent flags of the operator commands.
type cli struct {
	apiURL string
	output string
	token  string
	// codecKeyFile is --codec-key-file of the commands that fire or read
	// payloads; codec is what it holds, loaded before they run.
	codecKeyFile string
	codec        schemas.PayloadCodec
}

func newRootCmd() *cobra.Command {
	g := &cli{}
	root := &cobra.Command{
		Use:   "ax",
		Short: "AX, a distributed task scheduler",
		Long: `AX registers tasks, fires them (cron, delay, chain, event, manual), dispatches
each firing to an executor, retries it, and keeps every step auditable.

Run every service in one process with "ax dev", or each one alone (ax dispatcher,
ax trigger, ax executor, ax auditor, ax api). The operator commands (ax task,
ax fire, ax instance, …) talk to the HTTP API at --api; -o picks their output:
table, json or yaml.

Shell completion: "ax completion bash|zsh|fish|powershell" prints a script;
see "ax completion bash --help" for where to put it.

` + exitCodesHelp,
		Example: `  ax dev                                   # everything in one process
  ax task apply -f nightly-report.yaml     # register or update a task
  ax fire nightly-report --wait            # run it now and wait for the outcome
  ax instance list --task nightly-report   # its recent instances
  ax bench --count 1000                    # measure throughput and latency
  source <(ax completion bash)             # tab completion in this shell`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.Version = buildinfo.Get().Version
	root.SetVersionTemplate("ax {{.Version}}\n")
	pf := root.PersistentFlags()
	pf.StringVar(&g.apiURL, "api", envOr("AX_API_URL", defaultAPIURL), "base URL of the AX API (env AX_API_URL)")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table, json or yaml")
	pf.StringVar(&g.token, "token", "", "API token sent with every request (env AX_TOKEN; ax dev prints one)")
	// Every command is made here, one constructor per command, and gets the
	// root's persistent flags (--api, --output, --token) one way: the *cli
	// it is made with, which cobra fills before the command runs.
	for _, newCmd := range []func(g *cli) *cobra.Command{
		newTaskCmd, newFireCmd, newFiringCmd, newInstanceCmd, newWorkerCmd, newStreamCmd, newTokenCmd,
		newAlertCmd, newAuditCmd, newBenchCmd, newConformanceCmd, newDevCmd, newDrillCmd,
		newNATSServerCmd, newLogsCmd, newPodSecretCmd, newReportCmd, newSecretsCmd, newBackfillCmd, newDeadLettersCmd,
		newDispatcherCmd, newTriggerCmd, newExecutorCmd, newAPICmd, newAuditorCmd, newUserCmd, newVersionCmd,
		newImportCmd, newShadowCmd, newLedgerCmd, newExplainCmd, newLimitCmd,
	} {
		root.AddCommand(newCmd(g))
	}
	addCompletionExamples(root)
	return root
}

// client returns an API client that sends the API token: --token, else
// $AX_TOKEN. The API records the token's name as the operator of changes.
func (g *cli) client() *apiclient.Client {
	return g.clientWith(&http.Client{Timeout: time.Minute, Transport: apiclient.NewTransport()})
}

// clientWith is client over hc.
func (g *cli) clientWith(hc *http.Client) *apiclient.Client {
	c := apiclient.NewClient(g.apiURL, hc)
	c.Token = g.token
	c.Codec = g.codec
	if c.Token == "" {
		c.Token = os.Getenv("AX_TOKEN")
	}
	return c
}

// apiError adds to an error that is not the API's answer (the API is not
// there, say) where ax looked for it.
func (g *cli) apiError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*wire.Error](err); ok {
		return err
	}
	return fmt.Errorf("%w\n(is the AX API running at %s? start it with \"ax dev\" or \"ax api\", or point --api or AX_API_URL at it)", err, g.apiURL)
}

// operatorName is who runs ax: $AX_OPERATOR, else the OS user name. It is
// the default name of a token ax token create makes.
func operatorName() string {
	if op := os.Getenv("AX_OPERATOR"); op != "" {
		return op
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return ""
}

// timeOrDash formats a time in the local zone, or "-" for none.
func timeOrDash(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// orDash returns s, or "-" when it is empty, so that table columns line up.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// addCompletionExamples adds cobra's completion command now rather than
// when the root runs, so that its --help carries examples like every other
// command's.
func addCompletionExamples(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Example = `  source <(ax completion bash)                    # this shell only
  ax completion bash > /etc/bash_completion.d/ax  # every bash
  ax completion zsh > "${fpath[1]}/_ax"           # zsh
  ax completion fish > ~/.config/fish/completions/ax.fish`
		for _, sh := range c.Commands() {
			sh.Example = fmt.Sprintf("  ax completion %s --help   # where to install it\n  ax completion %s > ax.%s", sh.Name(), sh.Name(), sh.Name())
		}
	}
}
