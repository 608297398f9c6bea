package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/conformance"
	"github.com/ax-scheduler/ax/drill"
	"github.com/ax-scheduler/ax/examples/executor/handlers"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/servicetest"
)

// wirePub is one message a client publishes, as the NATS protocol carries
// it (PUB or HPUB).
type wirePub struct {
	subject, reply string
	hdr, payload   []byte
}

func (p *wirePub) encode() []byte {
	var b bytes.Buffer
	reply := ""
	if p.reply != "" {
		reply = " " + p.reply
	}
	if p.hdr != nil {
		fmt.Fprintf(&b, "HPUB %s%s %d %d\r\n", p.subject, reply, len(p.hdr), len(p.hdr)+len(p.payload))
		b.Write(p.hdr)
	} else {
		fmt.Fprintf(&b, "PUB %s%s %d\r\n", p.subject, reply, len(p.payload))
	}
	b.Write(p.payload)
	b.WriteString("\r\n")
	return b.Bytes()
}

// unsafeWire stands between a worker and the NATS server and makes what the
// worker publishes what an unsafe worker would: rewrite returns the
// messages to send in place of one (none: dropped; later ones: held).
// The worker under it is the Go executor; the server and the kit see only
// the wire, which is all a worker in another language shows them.
func unsafeWire(t *testing.T, serverURL string, rewrite func(*wirePub) []*wirePub) (url string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	server := strings.TrimPrefix(serverURL, "nats://")
	var mu sync.Mutex // one rewrite at a time: rules keep state
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", server)
			if err != nil {
				_ = c.Close()
				continue
			}
			t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
			go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
			go func() {
				defer s.Close()
				r := bufio.NewReaderSize(c, 1<<16)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					f := strings.Fields(line)
					if len(f) == 0 || (f[0] != "PUB" && f[0] != "HPUB") {
						if _, err := io.WriteString(s, line); err != nil {
							return
						}
						continue
					}
					p := &wirePub{subject: f[1]}
					hdrLen, total := 0, 0
					if f[0] == "PUB" {
						if len(f) == 4 {
							p.reply = f[2]
						}
						total, _ = strconv.Atoi(f[len(f)-1])
					} else {
						if len(f) == 5 {
							p.reply = f[2]
						}
						hdrLen, _ = strconv.Atoi(f[len(f)-2])
						total, _ = strconv.Atoi(f[len(f)-1])
					}
					body := make([]byte, total+2)
					if _, err := io.ReadFull(r, body); err != nil {
						return
					}
					if f[0] == "HPUB" {
						p.hdr = body[:hdrLen]
					}
					p.payload = body[hdrLen:total]
					mu.Lock()
					out := rewrite(p)
					mu.Unlock()
					for _, o := range out {
						if _, err := s.Write(o.encode()); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	return "nats://" + l.Addr().String()
}

// unsafeWorkers are the four unsafe workers, each a rule of unsafeWire
// (made anew per run: a rule may hold state), with the check of the kit
// each must fail.
var unsafeWorkers = []struct {
	name, check string
	rule        func() func(*wirePub) []*wirePub
}{
	{"lease by plain put", "lease: taken create-only", func() func(*wirePub) []*wirePub {
		return func(p *wirePub) []*wirePub {
			if strings.HasPrefix(p.subject, "$KV.ax-leases.") {
				p.hdr = bytes.Replace(p.hdr, []byte("Nats-Expected-Last-Subject-Sequence: 0\r\n"), nil, 1)
			}
			return []*wirePub{p}
		}
	}},
	{"ack without confirmation", "ack: confirmation awaited", func() func(*wirePub) []*wirePub {
		return func(p *wirePub) []*wirePub {
			if strings.HasPrefix(p.subject, "$JS.ACK.") && string(p.payload) == "+ACK" {
				p.reply = ""
			}
			return []*wirePub{p}
		}
	}},
	{"no fence on a redelivery", "fence: asked on a redelivery", func() func(*wirePub) []*wirePub {
		return func(p *wirePub) []*wirePub {
			if strings.HasPrefix(p.subject, "ax.fence.") {
				return nil
			}
			return []*wirePub{p}
		}
	}},
	{"logs after the final report", "logs: flushed before the final report", func() func(*wirePub) []*wirePub {
		// Each instance's lines wait for its final report (on its own
		// subject or in a batch), and go after it.
		held := map[string][]*wirePub{}
		return func(p *wirePub) []*wirePub {
			if rest, ok := strings.CutPrefix(p.subject, "ax.log."); ok {
				id, _, _ := strings.Cut(rest, ".")
				held[id] = append(held[id], p)
				return nil
			}
			out := []*wirePub{p}
			if strings.HasPrefix(p.subject, "ax.report.") {
				for id, lines := range held {
					final := bytes.Contains(p.payload, []byte(`"kind":"succeeded"`)) || bytes.Contains(p.payload, []byte(`"kind":"failed"`))
					if final && (strings.HasSuffix(p.subject, "."+id) || bytes.Contains(p.payload, []byte(`"instance_id":`+id+`,`))) {
						out = append(out, lines...)
						delete(held, id)
					}
				}
			}
			return out
		}
	}},
}

// TestConformanceFailsUnsafeWorkers runs the kit against each unsafe
// worker: it fails the check of the rule the worker breaks.
func TestConformanceFailsUnsafeWorkers(t *testing.T) {
	t.Parallel()
	for _, u := range unsafeWorkers {
		t.Run(strings.ReplaceAll(u.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			mux := executor.NewMux()
			handlers.RegisterConformance(mux, conformance.DefaultHandlerPrefix)
			s := newSystem(t)
			conn, err := nats.Connect(unsafeWire(t, s.srv.URL, u.rule()), nats.Name("unsafe worker"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(conn.Close)
			w, err := executor.New(executor.Options{Conn: conn, WorkerID: "unsafe", Pools: []string{conformancePool}, Mux: mux,
				Slots: 4, Logger: slog.New(zerolog.NewSlogHandler(s.log))})
			if err != nil {
				t.Fatal(err)
			}
			servicetest.Start(t, "unsafe worker", w)
			observer, _ := s.srv.Connect()
			// A worker that runs nothing (acks never confirmed) makes the
			// kit wait its whole wait for the cancel's start, for the
			// instances' ends and for the fence's instance.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			r, err := conformance.Executor(ctx, conformance.Options{Pool: conformancePool, Client: s.client, Conn: observer,
				Topology: s.srv.Topology, Wait: 2 * time.Minute, Logger: s.log})
			if err != nil {
				t.Fatalf("conformance: %v", err)
			}
			var b bytes.Buffer
			_ = r.WriteTable(&b)
			t.Logf("verdict:\n%s", b.String())
			if r.Passed() || !slices.Contains(r.Failed(), u.check) {
				t.Errorf("the kit passed check %q of a worker with %s (failed: %v)", u.check, u.name, r.Failed())
			}
			if !slices.ContainsFunc(r.Checks, func(c drill.Check) bool { return c.Name == u.check && !c.Info }) {
				t.Errorf("check %q was not made", u.check)
			}
		})
	}
}
