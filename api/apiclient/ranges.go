package apiclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
)

// Backfill starts a backfill of task's schedule over req's range.
func (c *Client) Backfill(ctx context.Context, task string, req wire.BackfillRequest) (schemas.Backfill, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return schemas.Backfill{}, fmt.Errorf("backfill %s: encode request: %w", task, err)
	}
	var out schemas.Backfill
	err = c.do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(task)+"/backfills", "application/json", body, &out)
	return out, err
}

// GetBackfill returns backfill id with its progress.
func (c *Client) GetBackfill(ctx context.Context, id int64) (schemas.Backfill, error) {
	var out schemas.Backfill
	err := c.do(ctx, http.MethodGet, "/v1/backfills/"+strconv.FormatInt(id, 10), "", nil, &out)
	return out, err
}

// ListBackfills lists the backfills of task (all when empty), newest first.
func (c *Client) ListBackfills(ctx context.Context, task string) ([]schemas.Backfill, error) {
	path := "/v1/backfills"
	if task != "" {
		path += "?task=" + url.QueryEscape(task)
	}
	var out wire.BackfillList
	err := c.do(ctx, http.MethodGet, path, "", nil, &out)
	return out.Backfills, err
}

// SetBackfill pauses, resumes or cancels backfill id (action "pause",
// "resume" or "cancel").
func (c *Client) SetBackfill(ctx context.Context, id int64, action string) (schemas.Backfill, error) {
	var out schemas.Backfill
	err := c.do(ctx, http.MethodPost, "/v1/backfills/"+strconv.FormatInt(id, 10)+"/"+url.PathEscape(action), "", nil, &out)
	return out, err
}

// BulkRerun reruns the instances req.Where matches (see wire.BulkRequest).
func (c *Client) BulkRerun(ctx context.Context, req wire.BulkRequest) (wire.BulkResult, error) {
	return c.bulk(ctx, "rerun", req)
}

// BulkCancel cancels the instances req.Where matches.
func (c *Client) BulkCancel(ctx context.Context, req wire.BulkRequest) (wire.BulkResult, error) {
	return c.bulk(ctx, "cancel", req)
}

func (c *Client) bulk(ctx context.Context, action string, req wire.BulkRequest) (wire.BulkResult, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return wire.BulkResult{}, fmt.Errorf("bulk %s: encode request: %w", action, err)
	}
	var out wire.BulkResult
	err = c.do(ctx, http.MethodPost, "/v1/instances/bulk/"+action, "application/json", body, &out)
	return out, err
}

// DeadLetters lists the dead-letter groups (of task, when set).
func (c *Client) DeadLetters(ctx context.Context, task string) ([]schemas.DeadLetterGroup, error) {
	path := "/v1/dead-letters"
	if task != "" {
		path += "?task=" + url.QueryEscape(task)
	}
	var out wire.DeadLetterList
	err := c.do(ctx, http.MethodGet, path, "", nil, &out)
	return out.Groups, err
}

// ReplayDeadLetters reruns a dead-letter group.
func (c *Client) ReplayDeadLetters(ctx context.Context, req wire.ReplayRequest) (wire.BulkResult, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return wire.BulkResult{}, fmt.Errorf("replay: encode request: %w", err)
	}
	var out wire.BulkResult
	err = c.do(ctx, http.MethodPost, "/v1/dead-letters/replay", "application/json", body, &out)
	return out, err
}
