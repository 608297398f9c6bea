package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/streams"
)

// settingHelp says what each topology setting (streams.Settings) sizes.
var settingHelp = map[string]string{
	"replicas":         "replicas of every stream and bucket (3 on a three-node cluster)",
	"duplicate_window": "how long a message id (Nats-Msg-Id) is remembered, so that a repeated publish is a no-op",
	"triggers_max_age": "how long AX_TRIGGERS and AX_FIRINGS keep firings (AX_FIRINGS its pending schedules too)",
	"audit_max_age":    "how long AX_AUDIT keeps the audit trail",
	"logs_max_age":     "how long AX_LOGS keeps task logs",
	"logs_max_bytes":   "most bytes of task logs AX_LOGS keeps; JetStream reserves them in its store when the stream is made",
	"lease_ttl":        "how long an attempt's lease lives without renewal: a killed worker's attempts are retried about this long after it died",
	"worker_ttl":       "how long a worker stays listed without a heartbeat",
	"once_ttl":         "how long executor.Once remembers that a business key's work succeeded",
}

// topologyFlags are the flags of the topology's settings, for the commands
// that own the topology (ax dispatcher, ax dev). A flag left unset keeps
// what the installation has; one that differs from it is refused unless
// --reconfigure is given (streams.Topology.Reconcile).
type topologyFlags struct {
	values      map[string]*string
	reconfigure bool
}

// flags adds the settings' flags to cmd, but those named in skip.
func (tf *topologyFlags) flags(cmd *cobra.Command, skip ...string) {
	f := cmd.Flags()
	tf.values = map[string]*string{}
	for _, s := range streams.Settings() {
		if slices.Contains(skip, s.Name) {
			continue
		}
		def := strconv.FormatInt(s.Default, 10)
		if s.Duration {
			def = time.Duration(s.Default).String()
		}
		tf.values[s.Name] = f.String(strings.TrimPrefix(s.Flag, "--"), os.Getenv(s.Env), fmt.Sprintf(
			"%s (unset: keep the installed value, %s on a new installation; env %s)", settingHelp[s.Name], def, s.Env))
	}
	f.BoolVar(&tf.reconfigure, "reconfigure", false,
		"change the installed streams and buckets to the settings the flags state (without it, a setting that differs from the installation is refused)")
}

// config returns the settings the flags state.
func (tf *topologyFlags) config() (streams.Config, error) {
	c := streams.Config{Reconfigure: tf.reconfigure}
	for _, s := range streams.Settings() {
		p, ok := tf.values[s.Name]
		if !ok || *p == "" {
			continue
		}
		var v int64
		var err error
		if s.Duration {
			var d time.Duration
			d, err = time.ParseDuration(*p)
			v = int64(d)
		} else {
			v, err = strconv.ParseInt(*p, 10, 64)
		}
		if err != nil || v <= 0 {
			what := "a positive whole number"
			if s.Duration {
				what = "a positive duration such as 30s or 24h"
			}
			return streams.Config{}, fmt.Errorf("%s %q (env %s): give %s, or leave it unset to keep the installed value", s.Flag, *p, s.Env, what)
		}
		c.Set(s.Name, v)
	}
	return c, nil
}
