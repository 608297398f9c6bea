package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
)

func newFireCmd(g *cli) *cobra.Command {
	var (
		payload        string
		payloadVersion int
		priority       string
		eventID        string
		idempotencyKey string
		runAt          string
		delay          time.Duration
		wait           bool
		timeout        time.Duration
		count          int
	)
	cmd := &cobra.Command{
		Use:   "fire TASK",
		Short: "Fire a task now or later and print its instance id",
		Long: `Fire a task through the API, as a manual run by you (the name of your API
token), and print the id of the instance the dispatcher created for it (just the
number, in table output). If the dispatcher has not created it within the API's
wait, ax says so on standard error and prints nothing on standard output.

--payload takes JSON, or @FILE to read it from a file (@- for standard input).
Firing twice with the same --event-id makes one instance. Firing twice with the
same --idempotency-key returns the first instance, and is refused when the
payload differs.

--delay or --run-at fire the task later: the instance is created at that time,
not before, and ax prints nothing on standard output (it says when on standard
error) unless it waits.

With --wait, ax then follows the instance until it ends and prints its final
state; --timeout must then cover any delay too. While it runs, the progress its
handler reports (Job.Progress) is drawn as a bar on standard error, or printed
there a line per value ("instance 42: 420/1200 (35%): uploading") when standard
error is not a terminal.

--count N fires the task N times (each firing its own event, so not with
--event-id or --idempotency-key) and prints the instance ids. With --wait it
waits for all of them: on a terminal it draws a progress bar, elsewhere it
prints "ID STATE" as each instance ends; then it prints how many ended in
each state, and exits 2 if any ended other than SUCCEEDED.

Exit codes:
  0  fired; with --wait, the instance SUCCEEDED
  1  the firing was refused (unknown or disabled task, bad payload version,
     idempotency key used with another payload, ...) or ax could not reach the
     API; the error says which
  2  with --wait: the instance ended FAILED, SKIPPED or CANCELLED
  3  with --wait: the instance did not end within --timeout`,
		Example: `  ax fire nightly-report
  ax fire nightly-report --payload '{"day": "2025-03-01"}' --priority urgent
  ax fire import --payload @batch.json --payload-version 2 --event-id import-2025-03-01
  ax fire charge --payload '{"order": 42}' --idempotency-key order-42
  ax fire reminder --delay 2h
  ax fire reminder --run-at 2025-03-01T09:00:00+01:00
  ax fire nightly-report --wait --timeout 10m && echo done
  ax fire resize-image --count 100 --wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			if wait && timeout <= 0 {
				return fmt.Errorf("--timeout %s: use a positive duration such as 30s or 10m", timeout)
			}
			switch {
			case count < 1:
				return fmt.Errorf("--count %d: fire at least once", count)
			case count > 1 && (eventID != "" || idempotencyKey != ""):
				return errors.New("--count fires several times, each with its own event; drop --event-id and --idempotency-key")
			}
			task := args[0]
			req := wire.FireRequest{PayloadVersion: payloadVersion, EventID: eventID, IdempotencyKey: idempotencyKey,
				Priority: schemas.Priority(priority), Operator: operatorName()}
			if payload != "" {
				if req.Payload, err = readPayload(cmd.InOrStdin(), payload); err != nil {
					return err
				}
			}
			switch {
			case delay < 0:
				return fmt.Errorf("--delay %s: use a positive duration such as 90s or 2h", delay)
			case delay > 0 && runAt != "":
				return errors.New("--delay and --run-at both say when to fire; give one of them")
			case delay > 0:
				req.Delay = delay.String()
			case runAt != "":
				if req.RunAt, err = time.Parse(time.RFC3339Nano, runAt); err != nil {
					return fmt.Errorf("--run-at %q: use an RFC 3339 time such as 2025-03-01T09:00:00Z or 2025-03-01T09:00:00+01:00", runAt)
				}
			}
			client := g.client()
			if count > 1 {
				return g.fireCount(cmd, client, task, req, count, wait, timeout)
			}
			res, err := client.Fire(cmd.Context(), task, req)
			if err != nil {
				return g.apiError(err)
			}
			return g.follow(cmd, client, res, wait, timeout, asJSON)
		},
	}
	f := cmd.Flags()
	f.StringVar(&payload, "payload", "", "payload handed to the handler: JSON, or @FILE (@- for standard input)")
	f.IntVar(&payloadVersion, "payload-version", 0, "version of the payload; must equal the task's schema_version (default 1)")
	f.StringVar(&priority, "priority", "", "priority of this run: urgent, normal or low (default: the task's)")
	f.StringVar(&eventID, "event-id", "", "id of the firing, to make retries of this command idempotent (default: a new random id)")
	f.StringVar(&idempotencyKey, "idempotency-key", "", "key that makes the firing happen once: the same key again returns the first instance (not with --event-id)")
	f.DurationVar(&delay, "delay", 0, "fire after this long, e.g. 90s or 2h")
	f.StringVar(&runAt, "run-at", "", "fire at this RFC 3339 time, e.g. 2025-03-01T09:00:00Z")
	f.BoolVar(&wait, "wait", false, "wait until the instance ends; the exit code tells how it ended")
	f.DurationVar(&timeout, "timeout", 5*time.Minute, "with --wait, how long to wait")
	f.IntVarP(&count, "count", "n", 1, "fire this many times, each its own event")
	cmd.PreRunE = g.useCodec
	codecFlag(cmd, &g.codecKeyFile, false, "the payload is encoded with it, the output shown decoded")
	return cmd
}

// fireCount is ax fire --count: it fires task count times and prints the
// instance ids; with wait, it waits for them all, showing progress, prints
// how many ended in each state, and turns any end other than SUCCEEDED, or
// the timeout, into an exit code.
func (g *cli) fireCount(cmd *cobra.Command, client *apiclient.Client, task string, req wire.FireRequest, count int, wait bool, timeout time.Duration) error {
	structured, err := g.json()
	if err != nil {
		return err
	}
	out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	res, err := fireMany(cmd.Context(), client, task, req, count)
	if err != nil {
		return g.apiError(err)
	}
	if !wait {
		if structured {
			return g.printData(out, res)
		}
		pending := 0
		for _, r := range res {
			if r.InstanceID == 0 {
				pending++
				continue
			}
			fmt.Fprintln(out, r.InstanceID)
		}
		if pending > 0 {
			fmt.Fprintf(errOut, "%d of the %d firings have no instance yet (delayed, or the dispatcher is behind); look for them with: ax instance list --task %s\n",
				pending, count, task)
		}
		return nil
	}

	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	progressOut := out
	if structured {
		progressOut = errOut
	}
	bar := newProgressBar(progressOut, isTerminal(out), count, "ended")
	ins, err := g.waitMany(ctx, client, res, func(in schemas.Instance) {
		bar.Step(fmt.Sprintf("%d %s", in.ID, in.State))
	})
	bar.Finish()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return &exitError{code: exitTimeout, err: fmt.Errorf("%d of the %d instances of %s did not end within %s; look for them with: ax instance list --task %s",
				count-bar.done, count, task, timeout, task)}
		}
		return g.apiError(err)
	}
	if structured {
		if err := g.printData(out, ins); err != nil {
			return err
		}
	} else if err := printStateCounts(out, ins); err != nil {
		return err
	}
	var failed []string
	for _, in := range ins {
		if in.State != schemas.StateSucceeded {
			failed = append(failed, fmt.Sprint(in.ID))
		}
	}
	if len(failed) > 0 {
		return &exitError{code: exitNotSucceeded, err: fmt.Errorf("%d of the %d instances ended other than SUCCEEDED: %s; see why with: ax instance get ID",
			len(failed), count, strings.Join(failed, ", "))}
	}
	return nil
}

// printStateCounts prints how many of ins ended in each state, as a table.
func printStateCounts(w io.Writer, ins []schemas.Instance) error {
	counts := map[schemas.State]int{}
	var order []schemas.State
	for _, in := range ins {
		if counts[in.State] == 0 {
			order = append(order, in.State)
		}
		counts[in.State]++
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "STATE\tINSTANCES")
	for _, st := range order {
		fmt.Fprintf(tw, "%s\t%d\n", st, counts[st])
	}
	return tw.Flush()
}

// follow reports a firing (of ax fire or ax instance rerun): the instance id,
// or on standard error why there is none yet; with wait, it then follows the
// instance until it ends, prints its final state and turns an end other than
// SUCCEEDED, or the timeout, into an exit code.
func (g *cli) follow(cmd *cobra.Command, client *apiclient.Client, res wire.FireResult, wait bool, timeout time.Duration, asJSON bool) error {
	out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if res.Existing {
		if res.InstanceID != 0 {
			fmt.Fprintf(errOut, "an earlier firing with this idempotency key made instance %d\n", res.InstanceID)
		} else {
			fmt.Fprintf(errOut, "an earlier firing with this idempotency key is waiting for its time\n")
		}
	}
	if !wait {
		switch {
		case asJSON:
			return g.printData(out, res)
		case res.InstanceID != 0:
			fmt.Fprintln(out, res.InstanceID)
		case !res.RunAt.IsZero():
			fmt.Fprintf(errOut, "fired %s as event %s, due at %s; the dispatcher creates its instance then; until then it is listed by: ax firing list --task %s (cancel it with: ax firing cancel %s %s)\n",
				res.Task, res.EventID, res.RunAt.Local().Format(time.RFC3339Nano), res.Task, res.Task, res.EventID)
		default:
			fmt.Fprintf(errOut, "fired %s as event %s, but the dispatcher has not created its instance yet (is it running?); look for it with: ax instance list --task %s\n",
				res.Task, res.EventID, res.Task)
		}
		return nil
	}

	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	if res.InstanceID == 0 {
		made, err := client.WaitFiring(ctx, res.Task, res.EventID)
		if err != nil {
			return g.timedOut(err, fmt.Errorf("the dispatcher created no instance for event %s of task %s within %s; is it running?", res.EventID, res.Task, timeout))
		}
		res.InstanceID = made.ID
	}
	if !asJSON {
		fmt.Fprintln(out, res.InstanceID)
	}
	// The instance's progress, as its handler reports it: a bar on a
	// terminal, a line per value elsewhere; on standard error, which
	// leaves standard output the id and the final state.
	var bar *progressBar
	var shown schemas.InstanceProgress
	in, err := client.WatchInstance(ctx, res.InstanceID, func(in schemas.Instance) {
		if in.Progress == nil || *in.Progress == shown {
			return
		}
		shown = *in.Progress
		if bar == nil {
			bar = &progressBar{w: errOut, terminal: isTerminal(errOut)}
		}
		bar.Set(int(shown.Done), int(shown.Total), shown.Message, fmt.Sprintf("instance %d: %s", res.InstanceID, progressText(shown)))
	})
	if bar != nil {
		bar.Finish()
	}
	if err != nil {
		return g.timedOut(err, fmt.Errorf("instance %d is still %s after %s; follow it with: ax instance get %d", res.InstanceID, in.State, timeout, res.InstanceID))
	}
	if asJSON {
		if err := g.printData(out, in); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(out, in.State)
	}
	if in.State != schemas.StateSucceeded {
		return &exitError{code: exitNotSucceeded, err: fmt.Errorf("instance %d ended %s%s", in.ID, in.State, why(in))}
	}
	return nil
}

// readPayload returns the --payload value as JSON: the value itself, or the
// contents of the file that @FILE names.
func readPayload(stdin io.Reader, v string) (json.RawMessage, error) {
	data, source := []byte(v), "--payload"
	if name, ok := strings.CutPrefix(v, "@"); ok {
		var err error
		if name == "-" {
			data, err = io.ReadAll(stdin)
		} else {
			data, err = os.ReadFile(name)
		}
		if err != nil {
			return nil, fmt.Errorf("read --payload: %w", err)
		}
		source = "the payload in " + name
	}
	var probe any
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON (%v); quote it for the shell, e.g. --payload '{\"day\": \"2025-03-01\"}'", source, err)
	}
	return json.RawMessage(data), nil
}

// why explains a final state that is not SUCCEEDED: the instance's error,
// or the reason of its last transition.
func why(in schemas.Instance) string {
	if in.Error != "" {
		return ": " + in.Error
	}
	if n := len(in.Transitions); n > 0 && in.Transitions[n-1].Reason != "" {
		return ": " + in.Transitions[n-1].Reason
	}
	return ""
}

// timedOut turns a wait that hit its deadline into exit code 3 with the
// message msg; other errors pass.
func (g *cli) timedOut(err, msg error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &exitError{code: exitTimeout, err: msg}
	}
	return g.apiError(err)
}
