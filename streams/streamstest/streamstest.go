// Package streamstest starts a real, embedded NATS server with JetStream for
// a test, with AX's topology in place.
package streamstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/streams"
)

// Server is a test's NATS server.
type Server struct {
	*server.Server
	// URL is the client URL (nats://127.0.0.1:<port>).
	URL string
	// Topology is the default topology, ensured with the Config given to NewServer.
	Topology streams.Topology
	t        testing.TB
}

// NewServer starts a JetStream server on a random loopback port with its
// store under t.TempDir(), ensures the topology with cfg, and shuts the
// server down when the test ends.
func NewServer(t testing.TB, cfg streams.Config) *Server {
	t.Helper()
	return NewServerStore(t, cfg, 0)
}

// NewServerStore is [NewServer] with JetStream's file store bounded to
// maxStore bytes (the server's max_file_store; 0: the default), for a test
// that fills it. Give cfg a small LogsMaxBytes: AX_LOGS reserves its size.
func NewServerStore(t testing.TB, cfg streams.Config, maxStore int64) *Server {
	t.Helper()
	s, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir(), MaxStore: maxStore})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	srv := &Server{Server: s, URL: s.ClientURL(), Topology: streams.Default(), t: t}
	_, js := srv.Connect()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Topology.Ensure(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	return srv
}

// Connect opens a connection that is closed when the test ends.
func (s *Server) Connect() (*nats.Conn, jetstream.JetStream) {
	s.t.Helper()
	nc, err := nats.Connect(s.URL, nats.Name(s.t.Name()))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		s.t.Fatal(err)
	}
	return nc, js
}
