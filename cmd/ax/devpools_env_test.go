package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/streams/natsauth"
)

// TestDevPoolEnvNamesTheHandlers: the settings file of an ax dev --pool
// pool names the handlers its user may serve (AX_HANDLERS), beside the
// connection, the pool and the worker id.
func TestDevPoolEnvNamesTheHandlers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := devPool{user: "executor-gpu", scope: natsauth.Scope{Pools: []string{"gpu"}, WorkerID: "gpu-1", Handlers: []string{"train.model", "eval"}}}
	if _, err := writeDevPools(dir, "nats://127.0.0.1:4222", []devPool{p}, map[string]string{"executor-gpu": "pw"}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "executor-gpu.env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"AX_POOLS=gpu\n", "AX_WORKER_ID=gpu-1\n", "AX_HANDLERS=train.model,eval\n", "NATS_USER=executor-gpu\n"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("the env file lacks %q:\n%s", want, data)
		}
	}
}
