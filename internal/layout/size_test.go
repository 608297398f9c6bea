package layout

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The bar for the services' hot path (issue 26): a function a reader
// takes in at once, a file that is one concept.
const (
	maxFuncLines = 60
	maxFileLines = 700
)

// sizeChecked lists the packages held to the bar: the services on the
// dispatch, report and attempt path, and what that path runs through —
// the store's statements, the streams, and the API's firing handlers
// (the whole api package).
var sizeChecked = []string{"dispatcher", "executor", "store", "streams", "api"}

// TestServicesStaySmall fails on a non-test function over maxFuncLines
// lines or a non-test file over maxFileLines lines in the packages of
// sizeChecked.
func TestServicesStaySmall(t *testing.T) {
	t.Parallel()
	for _, dir := range sizeChecked {
		files, err := filepath.Glob(filepath.Join("..", "..", dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s (%v)", dir, err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			for _, o := range oversized(t, path) {
				t.Errorf("%s/%s; split it (the bar: functions ≤ %d lines, files ≤ %d)", dir, o, maxFuncLines, maxFileLines)
			}
		}
	}
}

// oversized returns the functions of the Go file at path over
// maxFuncLines lines, and the file itself if over maxFileLines, each as
// "file.go: what, N lines".
func oversized(t *testing.T, path string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	name := filepath.Base(path)
	var out []string
	if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
		out = append(out, fmt.Sprintf("%s: the file, %d lines", name, n))
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
			out = append(out, fmt.Sprintf("%s: func %s, %d lines", name, fd.Name.Name, n))
		}
	}
	return out
}

// TestOversizedFinds checks the measure on a file with one function at
// the bar and one over it.
func TestOversizedFinds(t *testing.T) {
	t.Parallel()
	body := func(lines int) string { return strings.Repeat("\t_ = 0\n", lines-2) }
	src := "package x\n\nfunc atBar() {\n" + body(maxFuncLines) + "}\n\nfunc (T) over() {\n" + body(maxFuncLines+1) + "}\n\ntype T struct{}\n"
	path := filepath.Join(t.TempDir(), "x.go")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(oversized(t, path), "; ")
	if want := fmt.Sprintf("x.go: func over, %d lines", maxFuncLines+1); got != want {
		t.Errorf("oversized = %q, want %q", got, want)
	}
	long := filepath.Join(t.TempDir(), "long.go")
	if err := os.WriteFile(long, []byte("package x\n"+strings.Repeat("\n", maxFileLines)), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := oversized(t, long); len(got) != 1 || !strings.Contains(got[0], "the file") {
		t.Errorf("oversized(%d-line file) = %q, want the file", maxFileLines+1, got)
	}
}
