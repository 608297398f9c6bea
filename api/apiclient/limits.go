package apiclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
)

// ListLimits returns every named limit with its use, by name.
func (c *Client) ListLimits(ctx context.Context) ([]schemas.LimitUsage, error) {
	var out wire.LimitList
	err := c.do(ctx, http.MethodGet, "/v1/limits", "", nil, &out)
	return out.Limits, err
}

// GetLimit returns the named limit with its use.
func (c *Client) GetLimit(ctx context.Context, name string) (schemas.LimitUsage, error) {
	var out schemas.LimitUsage
	err := c.do(ctx, http.MethodGet, "/v1/limits/"+url.PathEscape(name), "", nil, &out)
	return out, err
}

// ApplyLimit creates or replaces the limit l.
func (c *Client) ApplyLimit(ctx context.Context, l schemas.Limit) (schemas.LimitUsage, error) {
	body, err := json.Marshal(l)
	if err != nil {
		return schemas.LimitUsage{}, fmt.Errorf("apply limit %s: encode request: %w", l.Name, err)
	}
	var out schemas.LimitUsage
	err = c.do(ctx, http.MethodPut, "/v1/limits/"+url.PathEscape(l.Name), "application/json", body, &out)
	return out, err
}

// DeleteLimit deletes the named limit.
func (c *Client) DeleteLimit(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/limits/"+url.PathEscape(name), "", nil, nil)
}

// SetLimitPaused pauses (or resumes) the named limit.
func (c *Client) SetLimitPaused(ctx context.Context, name string, paused bool) (schemas.LimitUsage, error) {
	verb := "resume"
	if paused {
		verb = "pause"
	}
	var out schemas.LimitUsage
	err := c.do(ctx, http.MethodPost, "/v1/limits/"+url.PathEscape(name)+"/"+verb, "", nil, &out)
	return out, err
}
