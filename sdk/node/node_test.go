// Package nodesdk_test runs the Node.js executor SDK's own tests (node
// --test, in sdk/node/test) inside `go test ./...`, so that `make test`
// runs them: it builds the ax binary the tests start as `ax dev`, installs
// the npm dependencies from the committed lockfile when they are missing
// or stale (npm ci), compiles the TypeScript (npm run build) and runs the
// suite, failing with its output.
package nodesdk_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// installHint is the one line a machine without Node.js reads.
const installHint = "the Node SDK's tests (sdk/node) need Node.js 20 or newer with npm on PATH: install them (Debian: sudo apt-get install -y nodejs npm; or https://nodejs.org) and run the tests again"

func TestNodeSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("the Node SDK's tests need Node.js and npm: skipped with -short; make test runs them")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal(installHint)
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatal(installHint)
	}
	if major := nodeMajor(t, node); major < 20 {
		t.Fatalf("node on PATH is version %d; %s", major, installHint)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()

	// go test puts its own go first on PATH.
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("find the go command to build ax for the Node SDK's tests: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "ax")
	run(ctx, t, "..", goBin, nil, "build", "-o", bin, "../cmd/ax")
	installDependencies(ctx, t, npm)
	run(ctx, t, ".", npm, nil, "run", "build")
	out := run(ctx, t, ".", npm, []string{"AX_BIN=" + bin}, "test")
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, "# ") {
			t.Log(strings.TrimPrefix(line, "# "))
		}
	}
}

// nodeMajor returns the major version of the node binary.
func nodeMajor(t *testing.T, node string) int {
	t.Helper()
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Fatalf("node --version: %v; %s", err, installHint)
	}
	m := regexp.MustCompile(`^v(\d+)\.`).FindSubmatch(bytes.TrimSpace(out))
	if m == nil {
		t.Fatalf("node --version printed %q; %s", out, installHint)
	}
	major, _ := strconv.Atoi(string(m[1]))
	return major
}

// installDependencies runs npm ci unless node_modules was installed from
// the package-lock.json there now (a stamp file holds its hash).
func installDependencies(ctx context.Context, t *testing.T, npm string) {
	t.Helper()
	lock, err := os.ReadFile("package-lock.json")
	if err != nil {
		t.Fatalf("read sdk/node/package-lock.json: %v", err)
	}
	sum := sha256.Sum256(lock)
	want := hex.EncodeToString(sum[:])
	stamp := filepath.Join("node_modules", ".ax-package-lock.sha256")
	if got, err := os.ReadFile(stamp); err == nil && strings.TrimSpace(string(got)) == want {
		return
	}
	run(ctx, t, ".", npm, nil, "ci", "--no-audit", "--no-fund")
	if err := os.WriteFile(stamp, []byte(want+"\n"), 0o644); err != nil {
		t.Fatalf("write %s: %v", stamp, err)
	}
}

// run runs name with args in dir, with env added to the test's, and
// returns its output; it fails the test with the output if the command fails.
func run(ctx context.Context, t *testing.T, dir, name string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s (in sdk/node/%s, after %v): %v\n%s", filepath.Base(name), strings.Join(args, " "), dir, time.Since(start).Round(time.Millisecond), err, out.String())
	}
	return out.String()
}
