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

// AlertQuery selects alerts for [Client.ListAlerts]; zero fields select everything.
type AlertQuery struct {
	State schemas.AlertState
	// Limit is the most alerts returned (the API's default is 100, its maximum 1000).
	Limit int
	// Before keeps the alerts whose id is lower, for paging.
	Before int64
}

// ListAlerts returns alerts, newest first.
func (c *Client) ListAlerts(ctx context.Context, q AlertQuery) ([]schemas.Alert, error) {
	v := url.Values{}
	if q.State != "" {
		v.Set("state", string(q.State))
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Before != 0 {
		v.Set("before", strconv.FormatInt(q.Before, 10))
	}
	path := "/v1/alerts"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out wire.AlertList
	err := c.do(ctx, http.MethodGet, path, "", nil, &out)
	return out.Alerts, err
}

// AckAlert acknowledges alert id and returns it. A resolved alert is an
// *[wire.Error] with Status 409, an unknown one 404.
func (c *Client) AckAlert(ctx context.Context, id int64) (schemas.Alert, error) {
	var out schemas.Alert
	err := c.do(ctx, http.MethodPost, "/v1/alerts/"+strconv.FormatInt(id, 10)+"/ack", "", nil, &out)
	return out, err
}

// ListAlertRules returns every alert rule, by name.
func (c *Client) ListAlertRules(ctx context.Context) ([]schemas.AlertRule, error) {
	var out wire.AlertRuleList
	err := c.do(ctx, http.MethodGet, "/v1/alert-rules", "", nil, &out)
	return out.Rules, err
}

// PutAlertRule creates the rule name or replaces it, and returns it.
func (c *Client) PutAlertRule(ctx context.Context, name string, req wire.AlertRuleRequest) (schemas.AlertRule, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return schemas.AlertRule{}, fmt.Errorf("put alert rule %s: encode request: %w", name, err)
	}
	var out schemas.AlertRule
	err = c.do(ctx, http.MethodPut, "/v1/alert-rules/"+url.PathEscape(name), "application/json", body, &out)
	return out, err
}

// ListAlertChannels returns every alert channel, by id.
func (c *Client) ListAlertChannels(ctx context.Context) ([]schemas.AlertChannel, error) {
	var out wire.AlertChannelList
	err := c.do(ctx, http.MethodGet, "/v1/alert-channels", "", nil, &out)
	return out.Channels, err
}

// AddAlertChannel adds a channel and returns it.
func (c *Client) AddAlertChannel(ctx context.Context, req wire.AlertChannelRequest) (schemas.AlertChannel, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return schemas.AlertChannel{}, fmt.Errorf("add alert channel: encode request: %w", err)
	}
	var out schemas.AlertChannel
	err = c.do(ctx, http.MethodPost, "/v1/alert-channels", "application/json", body, &out)
	return out, err
}

// DeleteAlertChannel deletes channel id and returns it.
func (c *Client) DeleteAlertChannel(ctx context.Context, id int64) (schemas.AlertChannel, error) {
	var out schemas.AlertChannel
	err := c.do(ctx, http.MethodDelete, "/v1/alert-channels/"+strconv.FormatInt(id, 10), "", nil, &out)
	return out, err
}
