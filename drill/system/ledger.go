package system

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ax-scheduler/ax/executor"
)

// The drill's handlers, which every executor of the sandbox serves.
const (
	// WorkHandler appends a start line to the ledger, works for the
	// payload's "ms" milliseconds (or until its context ends) and appends
	// an end line before it returns success.
	WorkHandler = "drill.work"
	// PoisonHandler always panics: a poison task.
	PoisonHandler = "drill.poison"
	// KillerHandler appends a start line to the ledger, works for the
	// payload's "ms" milliseconds and then ends its whole process with
	// os.Exit: a poison that kills its worker on every attempt, as a
	// panic on a goroutine the handler started does.
	KillerHandler = "drill.killer"
)

// Work is the payload of a [WorkHandler] attempt.
type Work struct {
	// MS is how long the attempt works, in milliseconds.
	MS int `json:"ms"`
	// Key is what a hash-routed drill task pins to a worker.
	Key string `json:"key,omitempty"`
}

// Handlers are the handlers of the sandbox's executors: the built-in ones
// and the drill's. Each executor's NATS user may pull only these queues.
func Handlers() []string {
	mux := executor.NewMux()
	executor.RegisterBuiltins(mux)
	RegisterHandlers(mux, "")
	return mux.Names()
}

// RegisterHandlers registers the drill's handlers on mux. Every run of
// [WorkHandler] appends to the ledger at path, one line when it starts and
// one when it ends (end after its work, cancel when its context ended first),
// with O_APPEND: the lines of several processes never interleave, and a
// line written is on file even if its process is killed right after.
func RegisterHandlers(mux *executor.Mux, path string) {
	registerThrottled(mux, path)
	mux.Handle(WorkHandler, executor.JSON(func(ctx context.Context, t *executor.Job, w Work) (any, error) {
		if err := appendLedger(path, "start", t); err != nil {
			return nil, err
		}
		work := time.NewTimer(time.Duration(w.MS) * time.Millisecond)
		defer work.Stop()
		select {
		case <-work.C:
		case <-ctx.Done():
			// The run ends without success: a cancel line says so.
			return nil, errors.Join(ctx.Err(), appendLedger(path, "cancel", t))
		}
		return nil, appendLedger(path, "end", t)
	}))
	mux.HandleFunc(PoisonHandler, func(context.Context, *executor.Job) (any, error) {
		panic("drill: a poison handler")
	})
	mux.Handle(KillerHandler, executor.JSON(func(ctx context.Context, t *executor.Job, w Work) (any, error) {
		if err := appendLedger(path, "start", t); err != nil {
			return nil, err
		}
		select {
		case <-time.After(time.Duration(w.MS) * time.Millisecond):
		case <-ctx.Done():
		}
		os.Exit(3)
		return nil, nil
	}))
}

func appendLedger(path, kind string, t *executor.Job) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("open the drill ledger: %w", err)
	}
	// One write of one short line: atomic with O_APPEND.
	_, err = fmt.Fprintf(f, "%s %d %d %s %d\n", kind, t.InstanceID, t.Attempt, t.WorkerID, time.Now().UnixNano())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write the drill ledger: %w", err)
	}
	return nil
}

// LedgerRun is one run of a handler as the ledger holds it.
type LedgerRun struct {
	Instance int64
	Attempt  int
	Worker   string
	Start    time.Time
	End      time.Time // zero: the run never ended (its worker died)
	// Cancelled says the run ended because its context did, without
	// success.
	Cancelled bool
}

// RunKey identifies an attempt.
type RunKey struct {
	Instance int64
	Attempt  int
}

// ReadLedger reads the ledger at path: every run, in the order they
// started. A ledger not written yet holds no runs. A start line of an
// attempt already started is a second run of it.
func ReadLedger(path string) ([]LedgerRun, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the drill ledger: %w", err)
	}
	defer f.Close()
	var runs []LedgerRun
	open := make(map[RunKey][]int) // attempt → indexes of its runs without an end
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 5 {
			return nil, fmt.Errorf("drill ledger %s: line %q: want kind instance attempt worker unix-nanos", path, sc.Text())
		}
		id, err1 := strconv.ParseInt(fields[1], 10, 64)
		attempt, err2 := strconv.Atoi(fields[2])
		nanos, err3 := strconv.ParseInt(fields[4], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("drill ledger %s: line %q: %w", path, sc.Text(), err)
		}
		k, at := RunKey{id, attempt}, time.Unix(0, nanos)
		switch fields[0] {
		case "start":
			open[k] = append(open[k], len(runs))
			runs = append(runs, LedgerRun{Instance: id, Attempt: attempt, Worker: fields[3], Start: at})
		case "end", "cancel":
			// The end belongs to the open run of that worker.
			for j, i := range open[k] {
				if runs[i].Worker == fields[3] {
					runs[i].End, runs[i].Cancelled = at, fields[0] == "cancel"
					open[k] = append(open[k][:j], open[k][j+1:]...)
					break
				}
			}
		default:
			return nil, fmt.Errorf("drill ledger %s: line %q: kind %q is not start, end or cancel", path, sc.Text(), fields[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the drill ledger: %w", err)
	}
	return runs, nil
}

// payload is the payload of a work firing.
func (w Work) payload() json.RawMessage {
	b, _ := json.Marshal(w)
	return b
}
