package apiclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
)

// ErrFiringPending is what [Client.InstanceByEvent] returns (wrapped in a
// *[PendingError]) for a delayed firing that waits for its due time.
var ErrFiringPending = errors.New("the firing is delayed and has no instance yet")

// PendingError says that a firing waits for its due time; it wraps
// [ErrFiringPending].
type PendingError struct{ Firing wire.PendingFiring }

func (e *PendingError) Error() string {
	return fmt.Sprintf("task %s event %s is due at %s: %v", e.Firing.Task, e.Firing.EventID,
		e.Firing.RunAt.Format("2006-01-02T15:04:05.000Z07:00"), ErrFiringPending)
}

func (e *PendingError) Unwrap() error { return ErrFiringPending }

// runOf reads GET /v1/tasks/{task}/runs/{event}: the instance, or a
// *PendingError for a firing that waits.
func (c *Client) runOf(ctx context.Context, task, eventID string) (schemas.Instance, error) {
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(task)+"/runs/"+url.PathEscape(eventID), "", nil, &raw); err != nil {
		return schemas.Instance{}, err
	}
	var probe struct {
		Pending bool `json:"pending"`
	}
	if json.Unmarshal(raw, &probe) == nil && probe.Pending {
		var f wire.PendingFiring
		if err := json.Unmarshal(raw, &f); err != nil {
			return schemas.Instance{}, fmt.Errorf("decode the pending firing %s of %s: %w", eventID, task, err)
		}
		return schemas.Instance{}, &PendingError{Firing: f}
	}
	var out schemas.Instance
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, fmt.Errorf("decode the instance of %s event %s: %w", task, eventID, err)
	}
	return out, c.open(&out)
}

// ListFirings returns the pending delayed firings, of task alone when it is
// not "", soonest due first, at most limit (0: the API's default).
func (c *Client) ListFirings(ctx context.Context, task string, limit int) (wire.FiringList, error) {
	v := url.Values{}
	if task != "" {
		v.Set("task", task)
	}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	path := "/v1/firings"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out wire.FiringList
	err := c.do(ctx, http.MethodGet, path, "", nil, &out)
	return out, err
}

// CancelFiring cancels the pending delayed firing eventID of task: it
// never fires. It returns the firing as it was.
func (c *Client) CancelFiring(ctx context.Context, task, eventID string) (wire.PendingFiring, error) {
	var out wire.PendingFiring
	err := c.do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(task)+"/runs/"+url.PathEscape(eventID)+"/cancel", "", nil, &out)
	return out, err
}

// FireNow fires the pending delayed firing eventID of task at once.
func (c *Client) FireNow(ctx context.Context, task, eventID string) (wire.FireResult, error) {
	var out wire.FireResult
	err := c.do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(task)+"/runs/"+url.PathEscape(eventID)+"/fire", "", nil, &out)
	return out, err
}
