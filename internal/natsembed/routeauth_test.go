package natsembed_test

import (
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// TestRogueServerCannotJoinTheCluster: a nats-server that knows a node's
// route port but not the cluster's route password is refused as a route
// (issue 24, hole 9: it joined, and an anonymous client on it read every
// service's messages and injected firings on the API's subject). A client
// of the rogue server then sees none of the cluster's messages and reaches
// none of its subscribers.
func TestRogueServerCannotJoinTheCluster(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	node := c.Node(0).ClusterAddr()

	log := &refusals{}
	rogue, err := server.NewServer(&server.Options{ServerName: "rogue", Host: "127.0.0.1", Port: -1, NoSigs: true,
		Cluster: server.ClusterOpts{Name: "ax", Host: "127.0.0.1", Port: -1},
		Routes:  []*url.URL{{Scheme: "nats-route", Host: node.String()}}})
	if err != nil {
		t.Fatal(err)
	}
	rogue.SetLogger(log, false, false)
	rogue.Start()
	t.Cleanup(func() { rogue.Shutdown(); rogue.WaitForShutdown() })

	// The rogue server dials the node at once and again each second: wait
	// until the node has refused it once, or a node holds a route to it
	// (the rogue counts its own dial as a route until the node's refusal
	// arrives: the nodes' side is the one that tells).
	joined := func() string {
		for i := range c.Size() {
			rz, err := c.Node(i).Routez(nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rz.Routes {
				if r.RemoteID == rogue.ID() {
					return c.NodeName(i)
				}
			}
		}
		return ""
	}
	deadline := time.Now().Add(30 * time.Second)
	for !log.refused() && joined() == "" {
		if time.Now().After(deadline) {
			t.Fatal("the rogue server was neither refused nor joined in 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if node := joined(); node != "" {
		t.Fatalf("node %s holds a route to the rogue server, which has no route credentials", node)
	}

	// Effect: nothing crosses between a client of the rogue server and the
	// cluster's clients, either way.
	onCluster, err := nats.Connect(c.NodeURL(0))
	if err != nil {
		t.Fatal(err)
	}
	defer onCluster.Close()
	onRogue, err := nats.Connect(rogue.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer onRogue.Close()
	clusterSub, err := onCluster.SubscribeSync("ax.>")
	if err != nil {
		t.Fatal(err)
	}
	rogueSub, err := onRogue.SubscribeSync("ax.>")
	if err != nil {
		t.Fatal(err)
	}
	for _, nc := range []*nats.Conn{onCluster, onRogue} {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := onRogue.Publish("ax.trigger.victim.api", []byte(`{"event_id":"injected"}`)); err != nil {
		t.Fatal(err)
	}
	if err := onCluster.Publish("ax.dispatch.default.normal.h", []byte(`{"payload":"secret"}`)); err != nil {
		t.Fatal(err)
	}
	for _, nc := range []*nats.Conn{onCluster, onRogue} {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// Each side's own message arrives; the other side's must not (its
	// absence has no event to await: 200 ms more, on loopback).
	if m, err := clusterSub.NextMsg(5 * time.Second); err != nil || m.Subject != "ax.dispatch.default.normal.h" {
		t.Fatalf("the cluster's subscriber got %v, %v first, want the cluster's own message", m, err)
	}
	if m, err := rogueSub.NextMsg(5 * time.Second); err != nil || m.Subject != "ax.trigger.victim.api" {
		t.Fatalf("the rogue's subscriber got %v, %v first, want its own message", m, err)
	}
	if m, err := clusterSub.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("a client of the rogue server injected %s into the cluster", m.Subject)
	}
	if m, err := rogueSub.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("a client of the rogue server read the cluster's %s: %s", m.Subject, m.Data)
	}
}

// refusals is a server logger that notes a route refused for its
// credentials.
type refusals struct {
	mu   sync.Mutex
	seen bool
}

func (r *refusals) refused() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.seen }

func (r *refusals) Errorf(format string, v ...any) {
	if strings.Contains(fmt.Sprintf(format, v...), "Authorization Violation") {
		r.mu.Lock()
		r.seen = true
		r.mu.Unlock()
	}
}
func (r *refusals) Noticef(string, ...any) {}
func (r *refusals) Warnf(string, ...any)   {}
func (r *refusals) Fatalf(string, ...any)  {}
func (r *refusals) Debugf(string, ...any)  {}
func (r *refusals) Tracef(string, ...any)  {}
