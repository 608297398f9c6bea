package apiclient

import (
	"context"
	"net/http"
	"net/url"

	"github.com/ax-scheduler/ax/api/wire"
)

// StartShadow puts the task called name in shadow mode and returns it: the
// task is enabled, fires on its schedules, and each firing is recorded as
// a SHADOW instance that nothing runs.
func (c *Client) StartShadow(ctx context.Context, name string) (wire.TaskInfo, error) {
	var out wire.TaskInfo
	err := c.do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(name)+"/shadow", "", nil, &out)
	return out, err
}

// StopShadow takes the task called name out of shadow mode and returns it:
// with cutOver enabled, so that its next firing runs; else disabled.
func (c *Client) StopShadow(ctx context.Context, name string, cutOver bool) (wire.TaskInfo, error) {
	var out wire.TaskInfo
	method, path := http.MethodDelete, "/v1/tasks/"+url.PathEscape(name)+"/shadow"
	if cutOver {
		method, path = http.MethodPost, "/v1/tasks/"+url.PathEscape(name)+"/cut-over"
	}
	err := c.do(ctx, method, path, "", nil, &out)
	return out, err
}
