package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/ax-scheduler/ax/schemas"
)

// Client calls the AX API. It is safe for concurrent use.
type Client struct {
	base string
	http *http.Client
	// Operator, when set, is sent as the X-Ax-Operator header, so that the
	// API records who applied a task version.
	Operator string
}

// NewClient returns a client of the API at baseURL (e.g.
// "http://127.0.0.1:8080"); a nil httpClient means http.DefaultClient.
func NewClient(baseURL string, httpClient *http.Client) *Client {
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), http: httpClient}
}

// InstanceQuery selects instances for [Client.ListInstances]; zero fields
// select everything.
type InstanceQuery struct {
	Task  string
	State schemas.State
	// Limit is the most instances returned (the API's default is 50, its maximum 500).
	Limit int
	// Before keeps the instances whose id is lower, for paging.
	Before int64
}

// ApplyTask sends a task definition; contentType is "application/json" or
// "application/yaml".
func (c *Client) ApplyTask(ctx context.Context, body []byte, contentType string) (ApplyResult, error) {
	var out ApplyResult
	err := c.do(ctx, http.MethodPost, "/v1/tasks", contentType, body, &out)
	return out, err
}

// ListTasks returns every task, by name.
func (c *Client) ListTasks(ctx context.Context) ([]TaskInfo, error) {
	var out taskList
	err := c.do(ctx, http.MethodGet, "/v1/tasks", "", nil, &out)
	return out.Tasks, err
}

// GetTask returns the task called name.
func (c *Client) GetTask(ctx context.Context, name string) (TaskInfo, error) {
	var out TaskInfo
	err := c.do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(name), "", nil, &out)
	return out, err
}

// SetTaskEnabled enables or disables the task called name and returns it.
func (c *Client) SetTaskEnabled(ctx context.Context, name string, enabled bool) (TaskInfo, error) {
	action := "disable"
	if enabled {
		action = "enable"
	}
	var out TaskInfo
	err := c.do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(name)+"/"+action, "", nil, &out)
	return out, err
}

// Fire fires task. The result has an InstanceID when the dispatcher created
// the instance while the API waited, and only the EventID otherwise (then
// see [Client.InstanceByEvent]).
func (c *Client) Fire(ctx context.Context, task string, req FireRequest) (FireResult, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return FireResult{}, fmt.Errorf("fire %s: encode request: %w", task, err)
	}
	var out FireResult
	err = c.do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(task)+"/runs", "application/json", body, &out)
	return out, err
}

// InstanceByEvent returns the instance that the firing eventID of task made,
// or an *[Error] with Status 404 while there is none.
func (c *Client) InstanceByEvent(ctx context.Context, task, eventID string) (schemas.Instance, error) {
	var out schemas.Instance
	err := c.do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(task)+"/runs/"+url.PathEscape(eventID), "", nil, &out)
	return out, err
}

// GetInstance returns the instance id with its transitions.
func (c *Client) GetInstance(ctx context.Context, id int64) (schemas.Instance, error) {
	var out schemas.Instance
	err := c.do(ctx, http.MethodGet, "/v1/instances/"+strconv.FormatInt(id, 10), "", nil, &out)
	return out, err
}

// ListInstances returns the instances q selects, newest first.
func (c *Client) ListInstances(ctx context.Context, q InstanceQuery) ([]schemas.Instance, error) {
	v := url.Values{}
	if q.Task != "" {
		v.Set("task", q.Task)
	}
	if q.State != "" {
		v.Set("state", string(q.State))
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Before != 0 {
		v.Set("before", strconv.FormatInt(q.Before, 10))
	}
	path := "/v1/instances"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out instanceList
	err := c.do(ctx, http.MethodGet, path, "", nil, &out)
	return out.Instances, err
}

// do sends one request and decodes a 2xx answer into out, or returns an
// *Error for any other status.
func (c *Client) do(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	if c.Operator != "" {
		req.Header.Set(HeaderOperator, c.Operator)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// A *url.Error would repeat the method and the URL.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return fmt.Errorf("%s %s: %w", method, c.base+path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return decodeError(resp, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// decodeError makes an *Error of a non-2xx answer, also one that did not
// come from the API (a proxy's HTML page, say).
func decodeError(resp *http.Response, data []byte) error {
	var body errorBody
	if err := json.Unmarshal(data, &body); err == nil && body.Error != nil && body.Error.Message != "" {
		body.Error.Status = resp.StatusCode
		return body.Error
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	e := &Error{Status: resp.StatusCode, Code: "http_" + strconv.Itoa(resp.StatusCode),
		Message: fmt.Sprintf("%s %s answered %s", resp.Request.Method, resp.Request.URL, resp.Status)}
	if msg != "" {
		e.Message += ": " + msg
	}
	return e
}

// IsNotFound reports whether err is an *[Error] with status 404.
func IsNotFound(err error) bool {
	e, ok := errors.AsType[*Error](err)
	return ok && e.Status == http.StatusNotFound
}

// Health returns nil when the API answers that PostgreSQL and NATS are up,
// and an *[Error] naming what is down otherwise.
func (c *Client) Health(ctx context.Context) error {
	var out healthBody
	return c.do(ctx, http.MethodGet, "/healthz", "", nil, &out)
}
