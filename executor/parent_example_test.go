package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
)

// A task chained after others (its definition's after) reads how each
// parent ended in the run, and its output, from its Job.
func ExampleJob_Parent() {
	publish := executor.HandlerFunc(func(ctx context.Context, t *executor.Job) (any, error) {
		report, ok := t.Parent("nightly-report")
		if !ok || report.State != schemas.StateSucceeded {
			return nil, executor.Permanent(errors.New("no report to publish"))
		}
		var out struct {
			URL string `json:"url"`
		}
		if err := json.Unmarshal(report.Output, &out); err != nil {
			return nil, executor.Permanent(fmt.Errorf("read the output of instance %d: %w", report.InstanceID, err))
		}
		fx := t.Parents["fx-rates"] // on: always, so it may have FAILED
		return fmt.Sprintf("published %s in %s (fx-rates %s)", out.URL, t.RunID, fx.State), nil
	})

	// Outside a worker, the parents are set by hand, as the dispatcher would.
	out, err := publish.HandleTask(context.Background(), &executor.Job{
		Name:  "report-publish",
		RunID: "run-4711",
		Parents: map[string]schemas.ParentResult{
			"nightly-report": {InstanceID: 4711, State: schemas.StateSucceeded, Output: json.RawMessage(`{"url": "s3://reports/2025-03-01.pdf"}`)},
			"fx-rates":       {InstanceID: 4712, State: schemas.StateFailed},
		},
	})
	fmt.Println(out, err)
	_, err = publish.HandleTask(context.Background(), &executor.Job{Name: "report-publish"})
	fmt.Println(err)
	// Output:
	// published s3://reports/2025-03-01.pdf in run-4711 (fx-rates FAILED) <nil>
	// no report to publish
}
