package apiclient

import (
	"bufio"
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
	"time"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
)

// Client calls the AX API. It is safe for concurrent use once its fields
// are set.
type Client struct {
	base string
	http *http.Client
	// Token is the API token sent as Authorization: Bearer with every
	// request; the API records its name as the operator of every change.
	Token string
	// Operator, when set, is sent as the X-Ax-Operator header.
	//
	// Deprecated: the API records the name of the token instead.
	Operator string
	// Codec, when set, encodes the payloads the client fires and reruns
	// with, so that the API and everything behind it hold only envelopes,
	// and decodes the payloads and outputs of the instances it returns (see
	// [schemas.PayloadCodec]). A repeated idempotency key whose stored
	// payload is the same plaintext under another envelope answers like
	// the same payload would (Existing), not 409.
	Codec schemas.PayloadCodec
}

// NewClient returns a client of the API at baseURL (e.g.
// "http://127.0.0.1:8080"); a nil httpClient means one over a shared
// [NewTransport].
func NewClient(baseURL string, httpClient *http.Client) *Client {
	if httpClient == nil {
		httpClient = defaultHTTPClient
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), http: httpClient}
}

// defaultHTTPClient is the HTTP client of a [NewClient] given none.
var defaultHTTPClient = &http.Client{Transport: NewTransport()}

// MaxIdleConnsPerHost is how many idle connections to the API a
// [NewTransport] keeps.
const MaxIdleConnsPerHost = 64

// NewTransport returns a transport for a client that has many requests in
// flight at once (ax bench, a service firing from many goroutines): a
// clone of [http.DefaultTransport] that keeps up to MaxIdleConnsPerHost
// idle connections to the API. The default keeps two: with more requests
// in flight, every connection beyond two was closed when its request
// ended and the next requests dialled new ones, each a TCP handshake and
// a new connection for the API to serve.
func NewTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = MaxIdleConnsPerHost
	return t
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
	// After keeps the instances whose id is higher, the lowest Limit of
	// them, for paging back towards the newest.
	After int64
	// Since and Until keep the instances fired in [Since, Until).
	Since, Until time.Time
	// Archived lists the instances moved to the history or the archive
	// (?archived=true) instead of the others.
	Archived bool
}

// ApplyTask sends a task definition; contentType is "application/json" or
// "application/yaml".
func (c *Client) ApplyTask(ctx context.Context, body []byte, contentType string) (wire.ApplyResult, error) {
	var out wire.ApplyResult
	err := c.do(ctx, http.MethodPost, "/v1/tasks", contentType, body, &out)
	return out, err
}

// ListTasks returns every task, by name.
func (c *Client) ListTasks(ctx context.Context) ([]wire.TaskInfo, error) {
	var out wire.TaskList
	err := c.do(ctx, http.MethodGet, "/v1/tasks", "", nil, &out)
	return out.Tasks, err
}

// GetTask returns the task called name.
func (c *Client) GetTask(ctx context.Context, name string) (wire.TaskInfo, error) {
	var out wire.TaskInfo
	err := c.do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(name), "", nil, &out)
	return out, err
}

// SetTaskEnabled enables or disables the task called name and returns it.
func (c *Client) SetTaskEnabled(ctx context.Context, name string, enabled bool) (wire.TaskInfo, error) {
	action := "disable"
	if enabled {
		action = "enable"
	}
	var out wire.TaskInfo
	err := c.do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(name)+"/"+action, "", nil, &out)
	return out, err
}

// DeleteTask deletes a task and returns it as it was.
func (c *Client) DeleteTask(ctx context.Context, name string) (wire.TaskInfo, error) {
	var out wire.TaskInfo
	err := c.do(ctx, http.MethodDelete, "/v1/tasks/"+url.PathEscape(name), "", nil, &out)
	return out, err
}

// SetTaskPaused pauses (paused) or resumes a task and returns it.
func (c *Client) SetTaskPaused(ctx context.Context, name string, paused bool) (wire.TaskInfo, error) {
	action := "resume"
	if paused {
		action = "pause"
	}
	var out wire.TaskInfo
	err := c.do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(name)+"/"+action, "", nil, &out)
	return out, err
}

// Fire fires task. The result has an InstanceID when the dispatcher created
// the instance while the API waited (or an earlier firing with the same
// idempotency key did: Existing), and only the EventID otherwise (then see
// [Client.InstanceByEvent]); a delayed firing has only its EventID and RunAt.
// A reused idempotency key with another payload is an *[wire.Error] with Status 409.
func (c *Client) Fire(ctx context.Context, task string, req wire.FireRequest) (wire.FireResult, error) {
	plain := req.Payload
	var err error
	if req.Payload, err = c.seal(req.Payload); err != nil {
		return wire.FireResult{}, fmt.Errorf("fire %s: %w", task, err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return wire.FireResult{}, fmt.Errorf("fire %s: encode request: %w", task, err)
	}
	var out wire.FireResult
	err = c.do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(task)+"/runs", "application/json", body, &out)
	if e, ok := errors.AsType[*wire.Error](err); ok && e.Code == "idempotency_conflict" && c.Codec != nil {
		// Another envelope of the same plaintext is the same payload.
		if in, gerr := c.InstanceByEvent(ctx, task, schemas.IdempotencyEventIDPrefix+req.IdempotencyKey); gerr == nil && wire.SameJSON(in.Payload, plain) {
			return wire.FireResult{InstanceID: in.ID, Task: task, EventID: in.EventID, State: in.State, Existing: true}, nil
		}
	}
	return out, err
}

// FireBatch fires task once for each of reqs (up to
// schemas.MaxTriggerBatch of them), in one request: those due now travel
// as one trigger message, a batch of firings (docs/protocol.md). It
// returns one result a firing, in the order of reqs, and does not wait for
// the instances: a result accepted (Status 202) has the EventID, which
// [Client.InstanceByEvent] reads, and a delayed one its RunAt too; one
// whose idempotency key an earlier firing used has Status 200 and
// Existing (its InstanceID, when that firing's instance is made). A firing
// refused alone (a payload the task's schema refuses, a reused key with
// another payload, …) has its Status and Error, whose Status is set too,
// and does not stop the others. A batch refused whole (more than
// schemas.MaxTriggerBatch firings, none, a task that does not exist, is
// disabled or paused) is an *[wire.Error] naming the reason, as for
// [Client.Fire]. With a Codec, each payload is encoded with it, and a
// reused key whose stored payload is the same plaintext under another
// envelope answers Existing, as for [Client.Fire].
func (c *Client) FireBatch(ctx context.Context, task string, reqs []wire.FireRequest) ([]wire.FireBatchItem, error) {
	sealed := make([]wire.FireRequest, len(reqs))
	for i, req := range reqs {
		var err error
		if req.Payload, err = c.seal(req.Payload); err != nil {
			return nil, fmt.Errorf("fire %s in bulk: firing %d: %w", task, i, err)
		}
		sealed[i] = req
	}
	body, err := json.Marshal(sealed)
	if err != nil {
		return nil, fmt.Errorf("fire %s in bulk: encode request: %w", task, err)
	}
	var out wire.FireBatchResult
	if err := c.do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(task)+"/runs", "application/json", body, &out); err != nil {
		return nil, err
	}
	if len(out.Results) != len(reqs) {
		return nil, fmt.Errorf("fire %s in bulk: the API answered %d results for %d firings", task, len(out.Results), len(reqs))
	}
	for i := range out.Results {
		r := &out.Results[i]
		if r.Error == nil {
			continue
		}
		r.Error.Status = r.Status
		if r.Error.Code != "idempotency_conflict" || c.Codec == nil {
			continue
		}
		// Another envelope of the same plaintext is the same payload.
		key := reqs[i].IdempotencyKey
		if in, gerr := c.InstanceByEvent(ctx, task, schemas.IdempotencyEventIDPrefix+key); gerr == nil && wire.SameJSON(in.Payload, reqs[i].Payload) {
			*r = wire.FireBatchItem{Status: http.StatusOK,
				FireResult: &wire.FireResult{InstanceID: in.ID, Task: task, EventID: in.EventID, State: in.State, Existing: true}}
		}
	}
	return out.Results, nil
}

// seal encodes a payload with the client's codec, if it has one.
func (c *Client) seal(payload json.RawMessage) (json.RawMessage, error) {
	if c.Codec == nil || len(payload) == 0 {
		return payload, nil
	}
	sealed, err := c.Codec.Encode(payload)
	if err != nil {
		return nil, fmt.Errorf("encode the payload with the codec: %w", err)
	}
	return sealed, nil
}

// open decodes, in place, the payload, the output and the parents'
// outputs of in with the client's codec, if it has one.
func (c *Client) open(in *schemas.Instance) error {
	if c.Codec == nil {
		return nil
	}
	var err error
	if in.Payload, err = c.Codec.Decode(in.Payload); err != nil {
		return fmt.Errorf("instance %d: payload: %w", in.ID, err)
	}
	if in.Output, err = c.Codec.Decode(in.Output); err != nil {
		return fmt.Errorf("instance %d: output: %w", in.ID, err)
	}
	for name, p := range in.Parents {
		if p.Output, err = c.Codec.Decode(p.Output); err != nil {
			return fmt.Errorf("instance %d: output of parent %q: %w", in.ID, name, err)
		}
		in.Parents[name] = p
	}
	return nil
}

// Rerun fires the task of instance id again as a new manual firing with the
// instance's payload and priority, by the client's Operator, and answers
// like [Client.Fire].
func (c *Client) Rerun(ctx context.Context, id int64) (wire.FireResult, error) {
	var out wire.FireResult
	err := c.do(ctx, http.MethodPost, "/v1/instances/"+strconv.FormatInt(id, 10)+"/rerun", "", nil, &out)
	return out, err
}

// RerunWith is [Client.Rerun] with a request: req.Payload, when set,
// replaces the instance's payload.
func (c *Client) RerunWith(ctx context.Context, id int64, req wire.RerunRequest) (wire.FireResult, error) {
	var err error
	if req.Payload, err = c.seal(req.Payload); err != nil {
		return wire.FireResult{}, fmt.Errorf("rerun instance %d: %w", id, err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return wire.FireResult{}, fmt.Errorf("rerun instance %d: encode request: %w", id, err)
	}
	var out wire.FireResult
	err = c.do(ctx, http.MethodPost, "/v1/instances/"+strconv.FormatInt(id, 10)+"/rerun", "application/json", body, &out)
	return out, err
}

// Cancel cancels an instance that has not ended, giving reason (optional).
// It returns the instance: CANCELLED, or as it was when the dispatcher had
// not applied the cancel within the API's RunWait.
func (c *Client) Cancel(ctx context.Context, id int64, reason string) (schemas.Instance, error) {
	body, err := json.Marshal(wire.CancelRequest{Reason: reason})
	if err != nil {
		return schemas.Instance{}, err
	}
	var out schemas.Instance
	err = c.do(ctx, http.MethodPost, "/v1/instances/"+strconv.FormatInt(id, 10)+"/cancel", "application/json", body, &out)
	if err == nil {
		err = c.open(&out)
	}
	return out, err
}

// InstanceByEvent returns the instance that the firing eventID of task made,
// an error wrapping [ErrFiringPending] (a *[PendingError]) while it is a
// delayed firing that waits, or an *[wire.Error] with Status 404 while
// there is neither.
func (c *Client) InstanceByEvent(ctx context.Context, task, eventID string) (schemas.Instance, error) {
	return c.runOf(ctx, task, eventID)
}

// GetInstance returns the instance id with its transitions.
func (c *Client) GetInstance(ctx context.Context, id int64) (schemas.Instance, error) {
	var out schemas.Instance
	err := c.do(ctx, http.MethodGet, "/v1/instances/"+strconv.FormatInt(id, 10), "", nil, &out)
	if err == nil {
		err = c.open(&out)
	}
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
	if q.After != 0 {
		v.Set("after", strconv.FormatInt(q.After, 10))
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.UTC().Format(time.RFC3339Nano))
	}
	if q.Archived {
		v.Set("archived", "true")
	}
	path := "/v1/instances"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out wire.InstanceList
	if err := c.do(ctx, http.MethodGet, path, "", nil, &out); err != nil {
		return nil, err
	}
	for i := range out.Instances {
		// An envelope the codec cannot open stays as it is in a list.
		in := out.Instances[i]
		if c.open(&in) == nil {
			out.Instances[i] = in
		}
	}
	return out.Instances, nil
}

// do sends one request and decodes a 2xx answer into out, or returns an
// *Error for any other status.
func (c *Client) do(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	return c.doWith(ctx, method, path, contentType, nil, body, out)
}

// doWith is do with the extra request headers hdr.
func (c *Client) doWith(ctx context.Context, method, path, contentType string, hdr http.Header, body []byte, out any) error {
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
	for k, v := range hdr {
		req.Header[k] = v
	}
	c.authorize(req)
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

// authorize sets the headers that say who sends req.
func (c *Client) authorize(req *http.Request) {
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if c.Operator != "" {
		req.Header.Set(wire.HeaderOperator, c.Operator)
	}
}

// ListWorkers returns the live workers (those whose heartbeat has not
// expired from the ax-workers bucket), by id.
func (c *Client) ListWorkers(ctx context.Context) ([]schemas.Worker, error) {
	var out wire.WorkerList
	err := c.do(ctx, http.MethodGet, "/v1/workers", "", nil, &out)
	return out.Workers, err
}

// ListStreams returns AX's JetStream streams and buckets with their
// consumers, and the names of the topology's streams that do not exist.
func (c *Client) ListStreams(ctx context.Context) (streams []wire.StreamInfo, missing []string, err error) {
	var out wire.StreamList
	err = c.do(ctx, http.MethodGet, "/v1/streams", "", nil, &out)
	return out.Streams, out.Missing, err
}

// ListTokens returns every API token, the revoked ones too (admin only).
func (c *Client) ListTokens(ctx context.Context) ([]schemas.Token, error) {
	var out wire.TokenList
	err := c.do(ctx, http.MethodGet, "/v1/tokens", "", nil, &out)
	return out.Tokens, err
}

// CreateToken makes an API token called name with role and returns it with
// its secret, which cannot be read again (admin only).
func (c *Client) CreateToken(ctx context.Context, name string, role schemas.Role) (wire.CreatedToken, error) {
	body, err := json.Marshal(wire.CreateTokenRequest{Name: name, Role: role})
	if err != nil {
		return wire.CreatedToken{}, fmt.Errorf("create token %s: encode request: %w", name, err)
	}
	var out wire.CreatedToken
	err = c.do(ctx, http.MethodPost, "/v1/tokens", "application/json", body, &out)
	return out, err
}

// RevokeToken revokes the token id and returns it (admin only).
func (c *Client) RevokeToken(ctx context.Context, id int64) (schemas.Token, error) {
	var out schemas.Token
	err := c.do(ctx, http.MethodDelete, "/v1/tokens/"+strconv.FormatInt(id, 10), "", nil, &out)
	return out, err
}

// decodeError makes an *Error of a non-2xx answer, also one that did not
// come from the API (a proxy's HTML page, say).
func decodeError(resp *http.Response, data []byte) error {
	var body wire.ErrorBody
	if err := json.Unmarshal(data, &body); err == nil && body.Error != nil && body.Error.Message != "" {
		body.Error.Status = resp.StatusCode
		return body.Error
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	e := &wire.Error{Status: resp.StatusCode, Code: "http_" + strconv.Itoa(resp.StatusCode),
		Message: fmt.Sprintf("%s %s answered %s", resp.Request.Method, resp.Request.URL, resp.Status)}
	if msg != "" {
		e.Message += ": " + msg
	}
	return e
}

// IsNotFound reports whether err is an *[wire.Error] with status 404.
func IsNotFound(err error) bool {
	e, ok := errors.AsType[*wire.Error](err)
	return ok && e.Status == http.StatusNotFound
}

// Health returns nil when the API answers that PostgreSQL and NATS are up,
// and an *[wire.Error] naming what is down otherwise.
func (c *Client) Health(ctx context.Context) error {
	var out wire.HealthBody
	return c.do(ctx, http.MethodGet, "/healthz", "", nil, &out)
}

// AuditQuery selects audit records for [Client.Audit]; zero fields select
// everything.
type AuditQuery struct {
	Task       string
	InstanceID int64
	Operator   string
	// Since keeps the records written at or after it.
	Since time.Time
	// Limit is the most records returned (the API's default is 100, its maximum 1000).
	Limit int
	// Before keeps the records after the one with this id, for paging.
	Before string
}

// Audit returns the audit records q selects — instance transitions and
// operator actions — newest first.
func (c *Client) Audit(ctx context.Context, q AuditQuery) ([]schemas.AuditRecord, error) {
	v := url.Values{}
	if q.Task != "" {
		v.Set("task", q.Task)
	}
	if q.InstanceID != 0 {
		v.Set("instance", strconv.FormatInt(q.InstanceID, 10))
	}
	if q.Operator != "" {
		v.Set("operator", q.Operator)
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.Format(time.RFC3339Nano))
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Before != "" {
		v.Set("before", q.Before)
	}
	path := "/v1/audit"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out wire.AuditList
	err := c.do(ctx, http.MethodGet, path, "", nil, &out)
	return out.Records, err
}

// LogQuery selects task log lines for [Client.Logs] and
// [Client.FollowLogs]; zero fields select every line.
type LogQuery struct {
	// Attempt keeps the lines of one attempt.
	Attempt int
	// Since keeps the lines written at or after it.
	Since time.Time
	// Limit is the most lines one page holds (the API's default is
	// [DefaultLogLimit], its maximum [MaxLogLimit]); FollowLogs ignores it.
	Limit int
	// After keeps the lines stored after this AX_LOGS stream sequence: the
	// Next of the previous page, or the id of the last event followed.
	After uint64
}

func (q LogQuery) values() url.Values {
	v := url.Values{}
	if q.Attempt != 0 {
		v.Set("attempt", strconv.Itoa(q.Attempt))
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.Format(time.RFC3339Nano))
	}
	if q.After != 0 {
		v.Set("after", strconv.FormatUint(q.After, 10))
	}
	return v
}

// Logs returns one page of the task log lines of instance id, oldest first:
// read on with After set to the page's Next while its More is true. An
// instance that does not exist is an *[wire.Error] with Status 404.
func (c *Client) Logs(ctx context.Context, id int64, q LogQuery) (wire.LogPage, error) {
	v := q.values()
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	path := "/v1/instances/" + strconv.FormatInt(id, 10) + "/logs"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out wire.LogPage
	err := c.do(ctx, http.MethodGet, path, "", nil, &out)
	return out, err
}

// FollowLogs calls fn with each task log line of instance id, in order:
// the lines stored, then each new one as it is stored. It returns the
// state the instance ended in once its last line was passed to fn; the
// error fn returns, which ends the stream; or an error when ctx ends or
// the stream breaks off (follow again with After set to the last line's
// sequence, which the error names). The client's http.Client must not
// have a Timeout shorter than the run it follows.
func (c *Client) FollowLogs(ctx context.Context, id int64, q LogQuery, fn func(schemas.LogLine) error) (schemas.State, error) {
	v := q.values()
	v.Set("follow", "true")
	path := "/v1/instances/" + strconv.FormatInt(id, 10) + "/logs?" + v.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", path, err)
	}
	req.Header.Set("Accept", "text/event-stream")
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return "", fmt.Errorf("GET %s: %w", c.base+path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return "", decodeError(resp, data)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	// Each event is "field: value" lines ended by a blank line; a line
	// starting with ':' is a comment (the heartbeat).
	var event, evID, data string
	last := q.After
	for sc.Scan() {
		text := sc.Text()
		if text != "" {
			field, value, _ := strings.Cut(text, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				event = value
			case "id":
				evID = value
			case "data":
				data = value
			}
			continue
		}
		ev, d, seq := event, data, evID
		event, evID, data = "", "", ""
		switch {
		case d == "":
		case ev == "end":
			var end struct {
				State schemas.State `json:"state"`
			}
			if err := json.Unmarshal([]byte(d), &end); err != nil {
				return "", fmt.Errorf("follow the logs of instance %d: decode the end event %q: %w", id, d, err)
			}
			return end.State, nil
		default:
			var line schemas.LogLine
			if err := json.Unmarshal([]byte(d), &line); err != nil {
				return "", fmt.Errorf("follow the logs of instance %d: decode line %s: %w", id, seq, err)
			}
			if n, err := strconv.ParseUint(seq, 10, 64); err == nil {
				last = n
			}
			if err := fn(line); err != nil {
				return "", err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("follow the logs of instance %d: %w", id, err)
	}
	err = sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return "", fmt.Errorf("follow the logs of instance %d: the stream broke off after line %d: %w", id, last, err)
}
