package handlers

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
)

// DrillNames are the handlers of the drill examples (examples/drill-*.yaml)
// that [Register] registers too.
var DrillNames = []string{"ledger.append", "ledger.append-unsafe", "sleep.ignore-cancel"}

// DefaultLedger is the file the ledger handlers [Register] registers write.
var DefaultLedger = filepath.Join(os.TempDir(), "ax-examples-ledger")

// registerDrill registers the drill examples' handlers on m.
func registerDrill(m *executor.Mux) {
	m.Handle("ledger.append", &Ledger{Path: DefaultLedger, Once: true})
	m.Handle("ledger.append-unsafe", &Ledger{Path: DefaultLedger})
	m.HandleFunc("sleep.ignore-cancel", sleepIgnoringCancel)
}

// Ledger is a handler whose side effect is a line appended to the file at
// Path (O_APPEND) for each time it applies: "<event id> <instance id>
// <attempt>". With Once it applies the effect under executor.Once keyed
// by the instance, so a re-run of the instance (its attempt retried after
// a crash) applies nothing more: it is idempotent. Without, every run
// appends: a re-run doubles the effect. It declares its idempotency check
// to ax drill (AppliedEffects), and it rests 300 ms after the effect, the
// rest of a real handler's work, during which it honours cancellation.
type Ledger struct {
	Path string
	Once bool

	mu sync.Mutex
}

// HandleTask applies the effect and returns how many lines it wrote.
func (l *Ledger) HandleTask(ctx context.Context, t *executor.Job) (any, error) {
	line := fmt.Sprintf("%s %d %d\n", t.EventID, t.InstanceID, t.Attempt)
	apply := func(context.Context) error { return l.append(line) }
	var err error
	if l.Once {
		err = executor.Once(ctx, fmt.Sprintf("ledger-%s-%d", t.EventID, t.InstanceID), apply)
	} else {
		err = apply(ctx)
	}
	if err != nil {
		return nil, err
	}
	select {
	case <-time.After(300 * time.Millisecond):
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	return map[string]any{"appended": true}, nil
}

func (l *Ledger) append(line string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(l.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open the ledger: %w", err)
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return fmt.Errorf("append to the ledger: %w", err)
	}
	return f.Close()
}

// AppliedEffects counts the ledger's lines of inst: how many times the
// effect was applied for it.
func (l *Ledger) AppliedEffects(_ context.Context, inst schemas.Instance) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.Open(l.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the ledger: %w", err)
	}
	defer f.Close()
	prefix := fmt.Sprintf("%s %d ", inst.EventID, inst.ID)
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			n++
		}
	}
	return n, sc.Err()
}

// sleepIgnoringCancel is examples/drill-ignores-cancel.yaml's handler: it
// sleeps the payload's "seconds" (default 10) and never looks at its
// context, so a cancel or its timeout does not stop it, the mistake ax
// drill task's cancellation check catches.
func sleepIgnoringCancel(_ context.Context, t *executor.Job) (any, error) {
	p := struct {
		Seconds *float64 `json:"seconds"`
	}{}
	if len(t.Payload) > 0 {
		if err := json.Unmarshal(t.Payload, &p); err != nil {
			return nil, executor.Permanent(fmt.Errorf("payload: want {\"seconds\": N}: %w", err))
		}
	}
	seconds := 10.0
	if p.Seconds != nil {
		seconds = *p.Seconds
	}
	time.Sleep(time.Duration(seconds * float64(time.Second))) // ignores ctx on purpose
	return map[string]any{"slept_seconds": seconds}, nil
}
