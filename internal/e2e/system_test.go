package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/ax-scheduler/ax/api"
	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/apitest"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/devstack"
	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/drill/system/systemtest"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/internal/wait/waittest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

func TestMain(m *testing.M) {
	waittest.VerifyTestMain(m, goleak.Cleanup(func(int) { systemtest.Remove() }))
}

// leaseTTL is short so that a lost worker is noticed within a test's patience.
const leaseTTL = 2 * time.Second

// system is one AX installation for a test: NATS, PostgreSQL, a dispatcher
// and the API, each service on its own connection.
type system struct {
	t      testing.TB
	srv    *streamstest.Server
	js     jetstream.JetStream
	store  *store.Store
	pool   *pgxpool.Pool
	client *apiclient.Client
	apiURL string
	log    zerolog.Logger
	// admin is the secret of an admin token called apitest.AdminName,
	// which client sends.
	admin string
	// dispatcher is the system's dispatcher, dispatchConn its connection.
	dispatcher   *dispatcher.Service
	dispatchConn *nats.Conn
	// stack runs the system's services (nil for a system of a test's own
	// making).
	stack *devstack.Stack
}

// newSystem starts a system; tune adjusts the dispatcher's options.
func newSystem(t testing.TB, tune ...func(*dispatcher.Options)) *system {
	t.Helper()
	return newSystemTTL(t, leaseTTL, tune...)
}

// newSystemTTL starts a system whose leases live ttl without renewal; tune
// adjusts the dispatcher's options. The goroutines of the NATS server, the
// dispatcher and the API carry the pprof label "service", so that a CPU
// profile of a benchmark splits by service.
func newSystemTTL(t testing.TB, ttl time.Duration, tune ...func(*dispatcher.Options)) *system {
	t.Helper()
	return newSystemWith(t, ttl, devstack.Executor{}, tune...)
}

// newSystemWith is newSystemTTL with an executor in the stack when ex has
// options (a worker id).
func newSystemWith(t testing.TB, ttl time.Duration, ex devstack.Executor, tune ...func(*dispatcher.Options)) *system {
	t.Helper()
	defer pprof.SetGoroutineLabels(context.Background())
	serviceLabel("nats-server")
	srv := streamstest.NewServer(t, streams.Config{LeaseTTL: ttl})
	_, js := srv.Connect()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	if os.Getenv("AX_TEST_LOG") != "" {
		log = log.Level(zerolog.DebugLevel)
	}
	s := &system{t: t, srv: srv, js: js, store: st, pool: pool, log: log}
	opts := devstack.Options{NATSURL: srv.URL, Streams: streams.Config{LeaseTTL: ttl},
		Services: []natsauth.Role{natsauth.Dispatcher, natsauth.API}, ProfileLabels: true}
	opts.Dispatcher.Store = st // for a tune that needs it; the stack sets it anyway
	for _, f := range tune {
		f(&opts.Dispatcher)
	}
	if ex.Options.WorkerID != "" {
		opts.Executors = []devstack.Executor{ex}
	}
	s.stack, _ = s.startStack(opts)
	s.dispatcher, s.dispatchConn = s.stack.Dispatcher, s.stack.Conn("dispatcher")
	serviceLabel("api")
	s.serveAPI(s.stack.API)
	return s
}

// startStack starts the services of opts (devstack) on s's store with s's
// logger, and stops them when the test ends, failing the test with the
// errors of their Runs; stop stops them before, reporting the same way,
// once. It fails the test when a service does not start.
func (s *system) startStack(opts devstack.Options) (stack *devstack.Stack, stop func()) {
	s.t.Helper()
	opts.Store, opts.Logger = s.store, s.log
	ctx, cancel := context.WithTimeout(context.Background(), servicetest.ReadyTimeout)
	defer cancel()
	stack, err := devstack.Start(ctx, opts)
	if err != nil {
		s.t.Fatal(err)
	}
	stop = sync.OnceFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), servicetest.StopTimeout)
		defer cancel()
		if err := stack.Stop(ctx); err != nil {
			s.t.Errorf("%v", err)
		}
	})
	s.t.Cleanup(stop)
	return stack, stop
}

// serveAPI serves a, made but not run by a stack, on a test HTTP server,
// with an admin token for s.client.
func (s *system) serveAPI(a *api.Service) {
	s.t.Helper()
	hs := httptest.NewServer(a.Handler())
	s.t.Cleanup(hs.Close)
	s.admin = apitest.Admin(s.t, s.store)
	// The transport ax's commands use (ax bench's requests in flight
	// reuse their connections), its idle ones closed before the server.
	hc := &http.Client{Transport: apiclient.NewTransport()}
	s.t.Cleanup(hc.CloseIdleConnections)
	s.client = apiclient.NewClient(hs.URL, hc)
	s.client.Token = s.admin
	s.apiURL = hs.URL
}

// serviceLabel sets the pprof label "service" of the calling goroutine, which
// every goroutine it starts from then on inherits.
func serviceLabel(name string) {
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("service", name)))
}

// clientAs returns a client of the API with a new token called name.
func (s *system) clientAs(name string, role schemas.Role) *apiclient.Client {
	c := apiclient.NewClient(s.apiURL, nil)
	c.Token = apitest.Token(s.t, s.store, name, role)
	return c
}

// executor starts an in-process executor serving mux on the default pool.
func (s *system) executor(workerID string, mux *executor.Mux, slots int) *executor.Service {
	conn, _ := s.srv.Connect()
	return executortest.Run(s.t, executor.Options{
		Conn: conn, WorkerID: workerID, Mux: mux, Slots: slots, Logger: slog.New(zerolog.NewSlogHandler(s.log)),
	})
}

// apply applies a task definition given as YAML.
func (s *system) apply(def string) {
	s.t.Helper()
	if _, err := s.client.ApplyTask(context.Background(), []byte(def), "application/yaml"); err != nil {
		s.t.Fatalf("apply task: %v", err)
	}
}

// fire fires a task through the API and returns the instance id.
func (s *system) fire(task string, payload any) int64 {
	s.t.Helper()
	req := wire.FireRequest{}
	if payload != nil {
		data, err := json.Marshal(payload)
		if err != nil {
			s.t.Fatal(err)
		}
		req.Payload = data
	}
	res, err := s.client.Fire(context.Background(), task, req)
	if err != nil {
		s.t.Fatalf("fire %s: %v", task, err)
	}
	if res.InstanceID == 0 {
		s.t.Fatalf("fire %s: no instance yet (event %s)", task, res.EventID)
	}
	return res.InstanceID
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	waittest.For(t, what, timeout, cond)
}

// waitState waits until the instance is in state and returns it.
func (s *system) waitState(id int64, state schemas.State, timeout time.Duration) schemas.Instance {
	s.t.Helper()
	var inst schemas.Instance
	waitFor(s.t, "instance to be "+string(state), timeout, func() (bool, error) {
		var err error
		inst, err = s.store.GetInstance(context.Background(), id)
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if inst.State.Terminal() && inst.State != state {
			s.t.Fatalf("instance %d ended %s (%s), want %s", id, inst.State, inst.Error, state)
		}
		return inst.State == state, nil
	})
	return inst
}

// drained waits until a consumer has handed out and seen acknowledged every message.
// The consumer's pending count may lag a message just stored, so it must
// also have acknowledged the last message of its subjects.
func (s *system) drained(stream, consumer string) {
	s.t.Helper()
	ctx := context.Background()
	waitFor(s.t, consumer+" to drain", 60*time.Second, func() (bool, error) {
		c, err := s.js.Consumer(ctx, stream, consumer)
		if err != nil {
			return false, err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return false, err
		}
		st, err := s.js.Stream(ctx, stream)
		if err != nil {
			return false, err
		}
		last, err := st.GetLastMsgForSubject(ctx, info.Config.FilterSubject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return info.NumPending == 0 && info.NumAckPending == 0, nil
		}
		if err != nil {
			return false, err
		}
		return info.NumPending == 0 && info.NumAckPending == 0 && info.AckFloor.Stream >= last.Sequence, nil
	})
	if stream == s.srv.Topology.TriggersStream() && consumer == s.srv.Topology.DispatcherConsumer().Durable {
		// The dispatcher takes firings from two streams: the API's and
		// AX's own (chain firings, retries) are in AX_FIRINGS.
		s.drained(s.srv.Topology.FiringsStream(), s.srv.Topology.FiringsConsumer().Durable)
	}
}

// path returns the transitions of an instance as "FROM→TO" strings.
func path(inst schemas.Instance) []string {
	var out []string
	for _, tr := range inst.Transitions {
		out = append(out, string(tr.From)+"→"+string(tr.To))
	}
	return out
}
