package pgcluster

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrNotInstalled is returned by [Start] when no PostgreSQL server
// installation is found on the machine.
var ErrNotInstalled = errors.New("no PostgreSQL server installation found " +
	"(looked for initdb, pg_ctl and postgres on PATH, in /usr/lib/postgresql/*/bin and in /usr/local/pgsql/bin): " +
	"install it with `apt-get install postgresql`, or set DATABASE_URL to use an existing PostgreSQL 15+ server")

// serverPrograms must all sit in one folder: pg_ctl starts the postgres
// beside it, and initdb checks that its postgres has the same version.
var serverPrograms = []string{"initdb", "pg_ctl", "postgres"}

// findBinDir returns the first folder that holds every server program: the
// folder of pg_ctl found on pathEnv (symlinks resolved, as Debian's
// /usr/bin wrappers or hand-made links point into the real installation),
// then the version folders matching each of globs, newest version first,
// then each of dirs.
func findBinDir(pathEnv string, globs, dirs []string) (string, error) {
	var candidates []string
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			continue
		}
		p := filepath.Join(d, "pg_ctl")
		if !isExecutable(p) {
			continue
		}
		if real, err := filepath.EvalSymlinks(p); err == nil {
			candidates = append(candidates, filepath.Dir(real))
		}
		candidates = append(candidates, d)
	}
	for _, g := range globs {
		matches, _ := filepath.Glob(g) // the patterns are constants: no ErrBadPattern
		slices.SortStableFunc(matches, func(a, b string) int { return slices.Compare(versionOf(b), versionOf(a)) })
		candidates = append(candidates, matches...)
	}
	candidates = append(candidates, dirs...)
	for _, d := range candidates {
		if hasServerPrograms(d) {
			return d, nil
		}
	}
	return "", ErrNotInstalled
}

func hasServerPrograms(dir string) bool {
	for _, name := range serverPrograms {
		if !isExecutable(filepath.Join(dir, name)) {
			return false
		}
	}
	return true
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// versionOf returns the version folder's name in a path like
// /usr/lib/postgresql/15/bin, split into its numbers ("9.6" → [9 6]).
// A name that is not a version gives nil, which sorts last.
func versionOf(binDir string) []int {
	name := filepath.Base(filepath.Dir(binDir))
	var v []int
	for part := range strings.SplitSeq(name, ".") {
		n, err := strconv.Atoi(part)
		if err != nil {
			return nil
		}
		v = append(v, n)
	}
	return v
}
