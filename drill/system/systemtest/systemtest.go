// Package systemtest helps tests start real ax processes, as the drill's
// sandbox does.
package systemtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
	buildOut  []byte
)

// BuildAX builds the ax binary once per test binary, with the Go toolchain
// that runs the test, and returns its path. The file is left in a
// temporary folder for the other tests of the binary.
func BuildAX(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ax-test-bin-")
		if err != nil {
			buildErr = err
			return
		}
		// The module's root, from this file's place in it.
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..", "..")
		binary = filepath.Join(dir, "ax")
		cmd := exec.Command("go", "build", "-o", binary, "./cmd/ax")
		cmd.Dir = root
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("build ax: %v\n%s", buildErr, buildOut)
	}
	return binary
}

// Remove removes what BuildAX built, if anything: call it from TestMain
// once the tests are over.
func Remove() {
	if binary != "" {
		_ = os.RemoveAll(filepath.Dir(binary))
	}
}
