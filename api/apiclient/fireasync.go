package apiclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/ax-scheduler/ax/api/wire"
)

// FireAsync fires task once, as [Client.Fire] does, but asks the API not to
// wait for the dispatcher (Prefer: respond-async): the answer comes once
// the firing is durable in JetStream, 202 with its EventID and no instance;
// [Client.WaitFiring] or [Client.InstanceByEvent] read the instance. An
// idempotency key reused with another payload is refused only when the
// API finds the earlier instance or firing before it publishes.
func (c *Client) FireAsync(ctx context.Context, task string, req wire.FireRequest) (wire.FireResult, error) {
	var err error
	if req.Payload, err = c.seal(req.Payload); err != nil {
		return wire.FireResult{}, fmt.Errorf("fire %s: %w", task, err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return wire.FireResult{}, fmt.Errorf("fire %s: encode request: %w", task, err)
	}
	var out wire.FireResult
	err = c.doWith(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(task)+"/runs", "application/json",
		http.Header{"Prefer": {"respond-async"}}, body, &out)
	return out, err
}
