package e2e_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/drill/system/systemtest"
	"github.com/ax-scheduler/ax/internal/logtest"
	"github.com/ax-scheduler/ax/store/storetest"
)

// TestQuickStart runs the README's quick start as a newcomer does, with a
// real `ax dev` process on ports of its own: the banner says how to reach
// the API (`export AX_API_URL=…`, `export AX_TOKEN=…`), and with just that
// in the environment the banner's own "Try it" line works, `ax task list`
// shows a PAUSED column, `ax logs` says when an instance has no lines, and
// `ax token create` makes a token through the API (ax dev's CLI knows no
// database URL).
func TestQuickStart(t *testing.T) {
	t.Parallel()
	bin := systemtest.BuildAX(t)
	httpAddr, out, m := startQuickStartDev(t, bin)
	if m[1] != "http://"+httpAddr {
		t.Errorf("the banner exports AX_API_URL=%s, want http://%s", m[1], httpAddr)
	}
	// The CLI gets what the banner says and no database URL, as in a
	// newcomer's second terminal.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "AX_") {
			env = append(env, kv)
		}
	}
	env = append(env, "AX_API_URL="+m[1], "AX_TOKEN="+m[2])
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	ax := func(args ...string) (string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env, cmd.Dir = env, root
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("ax %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		return stdout.String(), stderr.String()
	}

	// The banner's "Try it" line, as printed.
	try := regexp.MustCompile(`(?m)^\s*bin/ax task apply -f (\S+) && bin/ax fire (\S+) --payload '(.*)' --wait$`).FindStringSubmatch(out.String())
	if try == nil {
		t.Fatalf("no \"Try it\" line in the banner:\n%s", out.String())
	}
	ax("task", "apply", "-f", try[1])
	fired, _ := ax("fire", try[2], "--payload", try[3], "--wait", "-o", "json")
	if !strings.Contains(fired, `"state": "SUCCEEDED"`) {
		t.Fatalf("ax fire %s --wait: %s, want SUCCEEDED", try[2], fired)
	}
	id := regexp.MustCompile(`"id": (\d+)`).FindStringSubmatch(fired)
	if id == nil {
		t.Fatalf("no instance id in %s", fired)
	}

	if list, _ := ax("task", "list"); !regexp.MustCompile(`(?m)^NAME\s.*\bPAUSED\b`).MatchString(list) {
		t.Errorf("ax task list has no PAUSED column:\n%s", list)
	}
	// hello's handler logs nothing: ax logs says so (on standard error,
	// so that a pipe of lines stays clean).
	if logs, said := ax("logs", id[1]); strings.TrimSpace(logs+said) == "" {
		t.Errorf("ax logs %s printed nothing, want its lines or a word that it has none", id[1])
	}
	if tok, _ := ax("token", "create", "--name", "newcomer", "--role", "operator"); strings.TrimSpace(tok) == "" {
		t.Errorf("ax token create under ax dev printed %q, want the new token", tok)
	}
	if list, _ := ax("token", "list"); !strings.Contains(list, "newcomer") {
		t.Errorf("ax token list under ax dev does not show the token made through the API:\n%s", list)
	}
}

// startQuickStartDev starts ax dev on loopback ports free a moment before
// and waits for its banner; the moment the banner is out, the API, the
// metrics, NATS and NATS's monitoring must each accept a connection, with
// no retry, as a newcomer's next command would. It returns the HTTP
// address, the process's output and the banner's exports (AX_API_URL,
// AX_TOKEN). A port
// picked free can be taken by another process before ax dev listens on it:
// when ax dev exits saying so, it starts again on fresh ports (at most
// five times); any other exit fails the test.
func startQuickStartDev(t *testing.T, bin string) (string, *logtest.Buffer, []string) {
	t.Helper()
	httpAddr, _, out, m := startDevIn(t, bin, t.TempDir())
	return httpAddr, out, m
}

// startDevIn is startQuickStartDev with ax dev's data folder dir (which
// --ax-dev names) and more flags of ax dev; it returns the NATS address
// too.
func startDevIn(t *testing.T, bin, dir string, flags ...string) (string, string, *logtest.Buffer, []string) {
	t.Helper()
	exports := regexp.MustCompile(`(?m)^\s*export AX_API_URL=(\S+)\n\s*export AX_TOKEN=(\S+)$`)
	for try := 1; ; try++ {
		ports := make([]string, 4)
		for i := range ports {
			ports[i] = freeAddr(t)
		}
		httpAddr, natsAddr, monAddr, metricsAddr := ports[0], ports[1], ports[2], ports[3]
		out := &logtest.Buffer{Echo: os.Stderr}
		banner := &bannerWatch{w: out, re: exports, seen: make(chan struct{})}
		dev := exec.Command(bin, append([]string{"dev", "--data", dir, "--http", httpAddr, "--nats", natsAddr,
			"--nats-monitor", monAddr, "--metrics-addr", metricsAddr, "--log-level", "warn"}, flags...)...)
		dev.Env = append(os.Environ(), "DATABASE_URL="+storetest.URL(t))
		dev.Stdout, dev.Stderr = banner, banner
		if err := dev.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- dev.Wait() }()
		stop := func() {
			_ = dev.Process.Signal(os.Interrupt)
			select {
			case <-exited:
			case <-time.After(60 * time.Second):
				_ = dev.Process.Kill()
				<-exited
			}
		}
		var exitErr error
		select {
		case <-banner.seen:
			// At once, no retry: every address the banner names listens.
			for _, url := range []string{"http://" + httpAddr + "/healthz", "http://" + metricsAddr + "/metrics", "http://" + monAddr + "/varz"} {
				if !answers(url) {
					t.Errorf("%s does not answer right after the banner", url)
				}
			}
			if c, err := net.Dial("tcp", natsAddr); err != nil {
				t.Errorf("NATS at %s takes no connection right after the banner: %v", natsAddr, err)
			} else {
				c.Close()
			}
			t.Cleanup(stop)
			return httpAddr, natsAddr, out, exports.FindStringSubmatch(out.String())
		case exitErr = <-exited:
		case <-time.After(3 * time.Minute):
			stop()
			t.Fatalf("no banner from ax dev after 3 minutes:\n%s", out.String())
		}
		if !strings.Contains(out.String(), "address already in use") || try == 5 {
			t.Fatalf("ax dev exited (%v) before its banner (start %d):\n%s", exitErr, try, out.String())
		}
		t.Logf("ax dev found a port taken (start %d), starting again on fresh ports:\n%s", try, out.String())
	}
}

// bannerWatch passes ax dev's output to w and closes seen the moment the
// output matches re (the banner's last lines).
type bannerWatch struct {
	w    io.Writer
	re   *regexp.Regexp
	seen chan struct{}

	mu   sync.Mutex
	buf  bytes.Buffer
	done bool
}

func (b *bannerWatch) Write(p []byte) (int, error) {
	n, err := b.w.Write(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.done {
		b.buf.Write(p)
		if b.re.Match(b.buf.Bytes()) {
			b.done = true
			close(b.seen)
		}
	}
	return n, err
}

// answers reports whether a GET of url answers 200 OK.
func answers(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// freeAddr returns a loopback address with a port free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}
