package natsauthtest

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/natsauth"
)

// Server is a test's embedded NATS server that admits only the users it was
// started with.
type Server struct {
	*server.Server
	t testing.TB
}

// NewServer starts an embedded JetStream server on a random loopback port
// that admits the users opts names: opts.Users, or opts.Auth for users added
// while it runs. Its store is under t.TempDir() unless opts.StoreDir is set.
// The server shuts down when the test ends; NewServer fails the test when it
// cannot start or when opts names no users.
func NewServer(t testing.TB, opts natsembed.Options) *Server {
	t.Helper()
	if len(opts.Users) == 0 && opts.Auth == nil {
		t.Fatal("natsauthtest.NewServer: no users (set Options.Users or Options.Auth)")
	}
	if opts.StoreDir == "" {
		opts.StoreDir = t.TempDir()
	}
	s, err := natsembed.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return &Server{Server: s, t: t}
}

// Connect connects as user with password on the user's own inbox prefix
// ([natsauth.InboxPrefix]), as AX's services and workers do, with opts
// after those; the server's refusals to the connection are collected in the
// Refusals it returns. It fails the test when the server does not admit the
// user, and closes the connection when the test ends.
func (s *Server) Connect(user, password string, opts ...nats.Option) (*nats.Conn, *Refusals) {
	s.t.Helper()
	r := New()
	nc, err := nats.Connect(s.ClientURL(), append([]nats.Option{nats.UserInfo(user, password),
		nats.CustomInboxPrefix(natsauth.InboxPrefix(user)), nats.ErrorHandler(r.Handler)}, opts...)...)
	if err != nil {
		s.t.Fatalf("connect as %s: %v", user, err)
	}
	s.t.Cleanup(nc.Close)
	return nc, r
}

// Dispatcher connects as the dispatcher's user with password, ensures AX's
// default topology with it as the dispatcher does when it starts, and
// returns the connection's JetStream context, which may look at everything.
// It fails the test when the user is not admitted or the topology cannot be
// ensured.
func (s *Server) Dispatcher(password string) jetstream.JetStream {
	s.t.Helper()
	nc, _ := s.Connect(string(natsauth.Dispatcher), password)
	js, _ := jetstream.New(nc) // fails only on a bad option
	if err := streams.Default().Ensure(s.t.Context(), js, streams.Config{}); err != nil {
		s.t.Fatalf("ensure the topology as the dispatcher: %v", err)
	}
	return js
}
