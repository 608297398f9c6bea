package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
)

// TestCancelAnswersTheInstanceWhenTheWaitEnds pins the answer of a cancel
// that the dispatcher has not applied within RunWait: 202 with the instance
// as it is. A wait of a nanosecond ends before the first read of the
// instance; that read, cut short by the wait's deadline, once made the
// answer a zeroed instance ({"id":0,"task":"",…}), as a busy machine did
// with the default wait.
func TestCancelAnswersTheInstanceWhenTheWaitEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) { o.RunWait = time.Nanosecond })
	e.apply(echoTask)
	id := e.insertInstance("nightly-report", "ev-1", schemas.StateRunning)

	// No dispatcher runs: the cancel waits in the stream.
	status, body := e.do("POST", fmt.Sprintf("/v1/instances/%d/cancel", id), "application/json", strings.NewReader(`{"reason": "wrong input"}`))
	if status != http.StatusAccepted || body["id"] != float64(id) || body["task"] != "nightly-report" || body["state"] != string(schemas.StateRunning) {
		t.Errorf("cancel = %d %v, want 202 with instance %d of nightly-report, RUNNING", status, body, id)
	}
	inst, err := e.client.Cancel(t.Context(), id, "")
	if err != nil || inst.ID != id || inst.State != schemas.StateRunning {
		t.Errorf("Client.Cancel = %+v, %v; want instance %d RUNNING", inst, err, id)
	}
}

// TestFireAnswersTheInstanceFoundWhenTheWaitEnds: a firing whose instance is
// there when the wait ends is answered with it, even when the wait ended
// before its first read.
func TestFireAnswersTheInstanceFoundWhenTheWaitEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) { o.RunWait = time.Nanosecond })
	e.apply(echoTask)
	id := e.insertInstance("nightly-report", "ev-1", schemas.StateSucceeded)

	res, err := e.client.Fire(t.Context(), "nightly-report", wire.FireRequest{EventID: "ev-1", Payload: []byte(`{"n":1}`)})
	if err != nil || res.InstanceID != id || res.State != schemas.StateSucceeded {
		t.Errorf("Fire = %+v, %v; want instance %d SUCCEEDED", res, err, id)
	}
}
