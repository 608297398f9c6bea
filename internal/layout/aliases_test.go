package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// forwardingAllowed lists the forwarding names AX keeps on purpose, by
// "folder/file.go: Name", each with its reason; none now. Every type has
// one name: when a type moves, its callers move with it.
var forwardingAllowed = map[string]string{}

// TestNoForwardingNames finds type aliases (type X = Y) and forwarding
// constants and variables (X = pkg.X) in AX's Go files, tests included;
// each must be in forwardingAllowed.
func TestNoForwardingNames(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		files++
		rel, _ := filepath.Rel(root, path)
		for _, name := range forwardingNames(t, path) {
			if key := filepath.ToSlash(rel) + ": " + name; forwardingAllowed[key] == "" {
				t.Errorf("%s is a forwarding name: use the type's own name at every call site, or add it to forwardingAllowed with a reason", key)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d Go files; the walk found too few", files)
	}
}

// forwardingNames returns the type aliases and forwarding constants and
// variables declared at the top level of the Go file at path.
func forwardingNames(t *testing.T, path string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	var out []string
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range g.Specs {
			switch s := spec.(type) {
			case *ast.TypeSpec:
				if s.Assign.IsValid() {
					out = append(out, s.Name.Name)
				}
			case *ast.ValueSpec:
				for i, v := range s.Values {
					if sel, ok := v.(*ast.SelectorExpr); ok && i < len(s.Names) && sel.Sel.Name == s.Names[i].Name {
						if _, ok := sel.X.(*ast.Ident); ok {
							out = append(out, s.Names[i].Name)
						}
					}
				}
			}
		}
	}
	return out
}

// TestForwardingNamesFinds checks the finder on the shapes it looks for.
func TestForwardingNamesFinds(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.go")
	src := `package x

import "example.com/y"

type A = y.A
type B struct{}
type (
	C = y.C
	D y.D
)

const E = y.E
const F = y.G
var (
	H = y.H
	I = 1
)
`
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(forwardingNames(t, path), " ")
	if want := "A C E H"; got != want {
		t.Errorf("forwardingNames = %q, want %q", got, want)
	}
}

// TestOperatorToolsLinkNoServer: ax drill and the conformance checker act
// from the outside, through the API's client and its wire types; they
// link neither the API server nor the store (and so no PostgreSQL driver).
func TestOperatorToolsLinkNoServer(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "../../drill", "../../conformance").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, d := range strings.Fields(string(out)) {
		if d == module+"api" || d == module+"store" || strings.HasPrefix(d, "github.com/jackc/") {
			t.Errorf("drill or conformance links %s", d)
		}
	}
}
