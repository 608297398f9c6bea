// Package natsembed starts a nats-server with JetStream inside the process,
// for ax dev and for tests.
package natsembed

import (
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options configures an embedded server.
type Options struct {
	// Host and Port to listen on (defaults 127.0.0.1 and a random free port;
	// -1 also means random).
	Host string
	Port int
	// StoreDir holds JetStream's files. Required.
	StoreDir string
	// ServerName names the server (default "ax").
	ServerName string
	// MonitorHost and MonitorPort, when MonitorPort is not 0, open the
	// server's HTTP monitoring port (/varz, /jsz, …) that
	// prometheus-nats-exporter, NATS Surveyor and KEDA read; -1 means a
	// random free port (default host 127.0.0.1). 0 leaves it closed.
	MonitorHost string
	MonitorPort int
	// Users, when set, replaces anonymous access (see server.User).
	Users []*server.User
	// Auth, when set, decides who may connect instead of Users (see
	// server.Options.CustomClientAuthentication): a server whose users
	// may change while it runs.
	Auth server.Authentication
	// Logs prints the server's own log lines to stderr.
	Logs bool
	// ClusterName, when set, makes the server a node of a JetStream
	// cluster of that name, listening for routes on ClusterPort (at Host)
	// and connecting to Routes (nats-route://host:port of the other
	// nodes). [StartCluster] sets these; zero is a standalone server.
	ClusterName string
	ClusterPort int
	Routes      []*url.URL
	// RouteUser and RoutePassword, when RoutePassword is set, are what a
	// node must present to open a route to this one (the cluster's
	// authorization block); Routes then carry them as userinfo. Without
	// them any server that reaches ClusterPort joins as a route and sees
	// every message. [StartCluster] always sets them.
	RouteUser     string
	RoutePassword string
	// MaxStore bounds JetStream's file store in bytes (the server's
	// max_file_store); 0 leaves the server's default, most of the disk.
	// A small one lets a test fill the store.
	MaxStore int64
}

// ReadyWait is how long [Start] waits for a server to listen: the server
// sets up JetStream (reading its store) before it opens its listeners, which
// a loaded machine was seen to take over 10 s for a cluster's node (four
// clusters starting at once beside other test suites, load average 28).
const ReadyWait = time.Minute

// Start starts a server and waits until it accepts connections.
// Stop it with Shutdown and WaitForShutdown.
func Start(o Options) (*server.Server, error) {
	if o.StoreDir == "" {
		return nil, fmt.Errorf("start embedded nats: a JetStream store folder is required")
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port == 0 {
		o.Port = -1
	}
	if o.ServerName == "" {
		o.ServerName = "ax"
	}
	opts := &server.Options{
		ServerName:                 o.ServerName,
		Host:                       o.Host,
		Port:                       o.Port,
		JetStream:                  true,
		StoreDir:                   o.StoreDir,
		NoSigs:                     true,
		Users:                      o.Users,
		CustomClientAuthentication: o.Auth,
		// A task payload or output may be larger than NATS's 1 MiB default.
		MaxPayload:        8 << 20,
		JetStreamMaxStore: o.MaxStore,
	}
	if o.ClusterName != "" {
		opts.Cluster = server.ClusterOpts{Name: o.ClusterName, Host: o.Host, Port: o.ClusterPort}
		opts.Routes = o.Routes
		if o.RoutePassword != "" {
			opts.Cluster.Username, opts.Cluster.Password = o.RouteUser, o.RoutePassword
			opts.Routes = make([]*url.URL, len(o.Routes))
			for i, r := range o.Routes {
				withAuth := *r
				withAuth.User = url.UserPassword(o.RouteUser, o.RoutePassword)
				opts.Routes[i] = &withAuth
			}
		}
	}
	if o.MonitorPort != 0 {
		opts.HTTPHost = o.MonitorHost
		if opts.HTTPHost == "" {
			opts.HTTPHost = "127.0.0.1"
		}
		opts.HTTPPort = o.MonitorPort
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("start embedded nats: %w", err)
	}
	var shown server.Logger
	if o.Logs {
		s.ConfigureLogger()
		shown = s.Logger()
	}
	fatal := &fatalWatch{shown: shown, fatal: make(chan string, 1)}
	s.SetLogger(fatal, false, false)
	s.Start()
	// A server that cannot listen (its port taken) says so only in a fatal
	// log line, and is then never ready: end the wait with that line.
	for deadline := time.Now().Add(ReadyWait); !s.ReadyForConnections(50 * time.Millisecond); {
		select {
		case line := <-fatal.fatal:
			s.Shutdown()
			return nil, fmt.Errorf("start embedded nats: %s", line)
		default:
		}
		if time.Now().After(deadline) {
			s.Shutdown()
			return nil, fmt.Errorf("start embedded nats: not ready for connections after %v", ReadyWait)
		}
	}
	return s, nil
}

// fatalWatch is the server's logger: it passes lines to shown (when the
// server's logs are shown) and keeps the first fatal one.
type fatalWatch struct {
	shown server.Logger
	fatal chan string
}

func (l *fatalWatch) Fatalf(format string, v ...any) {
	select {
	case l.fatal <- fmt.Sprintf(format, v...):
	default:
	}
	if l.shown != nil {
		l.shown.Errorf(format, v...)
	}
}

func (l *fatalWatch) Noticef(format string, v ...any) {
	if l.shown != nil {
		l.shown.Noticef(format, v...)
	}
}

func (l *fatalWatch) Warnf(format string, v ...any) {
	if l.shown != nil {
		l.shown.Warnf(format, v...)
	}
}

func (l *fatalWatch) Errorf(format string, v ...any) {
	if l.shown != nil {
		l.shown.Errorf(format, v...)
	}
}

func (l *fatalWatch) Debugf(format string, v ...any) {
	if l.shown != nil {
		l.shown.Debugf(format, v...)
	}
}

func (l *fatalWatch) Tracef(format string, v ...any) {
	if l.shown != nil {
		l.shown.Tracef(format, v...)
	}
}
