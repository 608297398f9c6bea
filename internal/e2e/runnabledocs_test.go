package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/drill/system/systemtest"
)

// A runnable block is what the docs mark for TestRunnableDocs:
//
//   - in README.md, docs/*.md and examples/**/*.md, a fenced block opened
//     with "```sh runnable";
//   - in a comment of a file of examples/, a line "# runnable:" (or
//     "// runnable:"), followed by the commands, each comment line indented
//     by at least two spaces past the comment marker, up to the first line
//     that is not.
//
// A command ending in "# exits N" must exit N, any other 0; a line ending
// in '\' goes on on the next. Lines starting with "make " are the
// repository's own targets (make build, make dev): the test builds bin/ax
// and starts ax dev itself, so it skips them.
type runnableBlock struct {
	where    string // file:line
	commands []runnableCommand
}

type runnableCommand struct {
	line string
	exit int
}

var (
	runnableComment = regexp.MustCompile(`^\s*(#|//)\s*runnable:`)
	exitsComment    = regexp.MustCompile(`#\s*exits (\d+)\b`)
)

// runnableBlocks reads the runnable blocks of file (path relative to root).
func runnableBlocks(t *testing.T, root, file string) []runnableBlock {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	var (
		blocks  []runnableBlock
		cur     *runnableBlock
		prefix  string // the comment marker of a comment block
		pending string // a command continued on the next line
	)
	md := strings.HasSuffix(file, ".md")
	add := func(line string) {
		line = strings.TrimRight(line, " \t")
		if strings.HasSuffix(line, `\`) {
			pending += strings.TrimSuffix(line, `\`) + " "
			return
		}
		line, pending = pending+line, ""
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") || strings.HasPrefix(trimmed, "make ") {
			return
		}
		c := runnableCommand{line: trimmed}
		if m := exitsComment.FindStringSubmatch(trimmed); m != nil {
			c.exit, _ = strconv.Atoi(m[1])
		}
		cur.commands = append(cur.commands, c)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && md && strings.TrimSpace(line) == "```sh runnable":
			cur = &runnableBlock{where: fmt.Sprintf("%s:%d", file, n)}
		case cur == nil && !md && runnableComment.MatchString(line):
			cur = &runnableBlock{where: fmt.Sprintf("%s:%d", file, n)}
			prefix = runnableComment.FindStringSubmatch(line)[1]
		case cur != nil && md && strings.TrimSpace(line) == "```":
			blocks, cur = append(blocks, *cur), nil
		case cur != nil && md:
			add(line)
		case cur != nil:
			rest, ok := strings.CutPrefix(strings.TrimLeft(line, " \t"), prefix)
			if ok && strings.HasPrefix(rest, "  ") {
				add(rest)
				continue
			}
			blocks, cur = append(blocks, *cur), nil
		}
	}
	if cur != nil {
		if md {
			t.Errorf("%s: a runnable block that never closes", cur.where)
		}
		blocks = append(blocks, *cur)
	}
	return blocks
}

// TestRunnableDocs runs every runnable block of README.md, docs/*.md and
// examples/ (see runnableBlock) against a live ax dev, started by the test
// as a process, in a folder that holds what the docs name: bin/ax (the
// binary the test built; ax on PATH is the same), examples/ and ax dev's
// data folder .ax, with ax dev's exports (AX_API_URL, AX_TOKEN) and
// NATS_URL set. Each block runs as one bash script, in file order, README
// first, so a block may use what the one before applied.
func TestRunnableDocs(t *testing.T) {
	t.Parallel()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	files := []string{"README.md"}
	for _, pattern := range []string{"docs/*.md", "examples/*", "examples/*/*"} {
		m, _ := filepath.Glob(filepath.Join(root, pattern))
		for _, f := range m {
			if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() {
				rel, _ := filepath.Rel(root, f)
				files = append(files, rel)
			}
		}
	}
	var blocks []runnableBlock
	for _, f := range files {
		blocks = append(blocks, runnableBlocks(t, root, f)...)
	}
	if len(blocks) < 4 {
		t.Fatalf("found %d runnable blocks, want the README's quick start among them: %v", len(blocks), blocks)
	}

	bin := systemtest.BuildAX(t)
	work := t.TempDir()
	if err := os.Mkdir(filepath.Join(work, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"bin/ax": bin, "examples": filepath.Join(root, "examples")} {
		abs, _ := filepath.Abs(target)
		if err := os.Symlink(abs, filepath.Join(work, link)); err != nil {
			t.Fatal(err)
		}
	}
	_, natsAddr, _, m := startDevIn(t, bin, filepath.Join(work, ".ax"))
	env := []string{"PATH=" + filepath.Join(work, "bin") + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"), "AX_API_URL=" + m[1], "AX_TOKEN=" + m[2], "NATS_URL=nats://" + natsAddr}
	for _, b := range blocks {
		if len(b.commands) == 0 {
			t.Errorf("%s: a runnable block without a command", b.where)
			continue
		}
		t.Logf("%s: %d commands", b.where, len(b.commands))
		var script strings.Builder
		for _, c := range b.commands {
			fmt.Fprintf(&script, "%s\nrc=$?; if [ $rc -ne %d ]; then echo %s >&2; exit 1; fi\n",
				c.line, c.exit, strconv.Quote(fmt.Sprintf("%s: exit $rc, want %d: %s", b.where, c.exit, c.line)))
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
		cmd.Dir, cmd.Env = work, env
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("%s: %v\n%s", b.where, err, out)
		}
	}
}
