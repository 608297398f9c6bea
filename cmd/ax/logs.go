package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/schemas"
)

func newLogsCmd(g *cli) *cobra.Command {
	var (
		q      apiclient.LogQuery
		since  string
		follow bool
	)
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print what an instance's handler logged, oldest first",
		Long: `Print the task log of an instance: every line its handler logged through the
executor's context logger, oldest first, as "time level message key=value…",
with a header line where an attempt starts. The lines are kept in the AX_LOGS
stream, so they can be read while the instance runs and after its executor is
gone (the stream keeps them 7 days by default).

With -f, ax prints the lines there are and then each new line as it comes,
until the instance has ended and its last line is printed. -o json prints one
JSON object per line (instance_id, task, attempt, worker_id, level, message,
time, fields).`,
		Example: `  ax logs 42
  ax logs 42 -f
  ax logs 42 --attempt 2 --since 10m
  ax logs 42 -o json | jq -r 'select(.level == "error") | .message'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			id, err := parseInstanceID(args[0])
			if err != nil {
				return err
			}
			if q.Attempt < 0 {
				return fmt.Errorf("--attempt %d: attempts count from 1", q.Attempt)
			}
			if since != "" {
				if q.Since, err = parseSince(since, time.Now()); err != nil {
					return fmt.Errorf("--since %q: %w", since, err)
				}
			}
			p := &logPrinter{w: cmd.OutOrStdout(), json: asJSON, yaml: g.output == outputYAML}
			if follow {
				// A followed run may last longer than any client timeout.
				client := g.clientWith(&http.Client{})
				state, err := client.FollowLogs(cmd.Context(), id, q, p.print)
				if err != nil {
					return g.apiError(err)
				}
				if !asJSON {
					if p.lines == 0 {
						noLines(cmd.ErrOrStderr(), id, q)
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "instance %d ended %s\n", id, state)
				}
				return nil
			}
			client := g.client()
			for {
				page, err := client.Logs(cmd.Context(), id, q)
				if err != nil {
					return g.apiError(err)
				}
				for _, l := range page.Lines {
					if err := p.print(l); err != nil {
						return err
					}
				}
				if !page.More {
					if p.lines == 0 && !asJSON {
						noLines(cmd.ErrOrStderr(), id, q)
					}
					return nil
				}
				q.After = page.Next
			}
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "print new lines as they come, until the instance has ended")
	f.IntVar(&q.Attempt, "attempt", 0, "only the lines of this attempt")
	f.StringVar(&since, "since", "", "only the lines written since then: a duration back from now (90m, 24h) or an RFC 3339 time")
	return cmd
}

// noLines says on w that instance id has no log lines that q selects, so
// that an empty answer is not mistaken for a hang or a fault.
func noLines(w io.Writer, id int64, q apiclient.LogQuery) {
	filter := ""
	if q.Attempt > 0 || !q.Since.IsZero() {
		filter = " that --attempt and --since select"
	}
	fmt.Fprintf(w, "instance %d has no log lines%s: its handler has logged nothing through the context logger (yet), or its lines are older than AX_LOGS keeps\n", id, filter)
}

// logPrinter prints task log lines as text, JSON lines or YAML documents.
type logPrinter struct {
	// lines counts the lines printed.
	lines int
	w     io.Writer
	json  bool
	// yaml, with json, prints each line as a YAML document after "---".
	yaml bool
	// attempt and worker are those of the last line printed.
	attempt int
	worker  string
}

func (p *logPrinter) print(l schemas.LogLine) error {
	p.lines++
	if p.yaml {
		if _, err := io.WriteString(p.w, "---\n"); err != nil {
			return err
		}
		return printYAML(p.w, l)
	}
	if p.json {
		data, err := json.Marshal(l)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.w, "%s\n", data)
		return err
	}
	if l.Attempt != p.attempt || l.WorkerID != p.worker {
		p.attempt, p.worker = l.Attempt, l.WorkerID
		if _, err := fmt.Fprintf(p.w, "--- attempt %d on worker %s\n", l.Attempt, l.WorkerID); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintln(p.w, formatLogLine(l))
	return err
}

// formatLogLine formats a line as "time level message key=value…", the
// fields in the order the handler logged them.
func formatLogLine(l schemas.LogLine) string {
	var b strings.Builder
	b.WriteString(l.Time.Local().Format("2006-01-02 15:04:05.000"))
	fmt.Fprintf(&b, " %-5s %s", strings.ToUpper(orDash(l.Level)), l.Message)
	dec := json.NewDecoder(bytes.NewReader(l.Fields))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return b.String()
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			break
		}
		fmt.Fprintf(&b, " %s=%s", tok, fieldValue(v))
	}
	return b.String()
}

// fieldValue formats a field's JSON value: a string bare when it reads
// unambiguously so, quoted otherwise; anything else as compact JSON.
func fieldValue(v json.RawMessage) string {
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		if s == "" || strings.ContainsAny(s, " \t\r\n=\"") {
			return strconv.Quote(s)
		}
		return s
	}
	var c bytes.Buffer
	if err := json.Compact(&c, v); err != nil {
		return string(v)
	}
	return c.String()
}
