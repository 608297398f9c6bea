package apiclient_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/wire"
)

// TestManyRequestsInFlightReuseTheirConnections fires rounds of 8 requests
// at once, as ax bench does at 500 firings/s, through a client made with no
// HTTP client of its own: the rounds after the first reuse the first
// round's connections. Over http.DefaultClient, which keeps two idle
// connections a host, every round dialled six new ones (55 in all).
func TestManyRequestsInFlightReuseTheirConnections(t *testing.T) {
	t.Parallel()
	var dialled atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"task":"t","event_id":"e"}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			dialled.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	client := apiclient.NewClient(srv.URL, nil)
	const rounds, inFlight = 10, 8
	for range rounds {
		var wg sync.WaitGroup
		for range inFlight {
			wg.Go(func() {
				if _, err := client.FireAsync(context.Background(), "t", wire.FireRequest{}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	// A connection goes back to the idle ones just after its answer, so a
	// round may dial before the round before has given all of its back
	// (9 in one run of make test): at most twice the requests in flight,
	// where two idle connections a host dialled six a round.
	if n := dialled.Load(); n > 2*inFlight {
		t.Errorf("%d rounds of %d requests at once dialled %d connections, want at most %d", rounds, inFlight, n, 2*inFlight)
	}
}
