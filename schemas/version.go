package schemas

import (
	"cmp"
	"strconv"
	"strings"
)

// VersionAtLeast reports whether the semantic version v
// (MAJOR.MINOR.PATCH with an optional -prerelease; build metadata after
// '+' is ignored) is min or newer, by the precedence rules of Semantic
// Versioning 2.0.0: 1.4.0-rc.1 < 1.4.0 < 1.10.0. An empty min holds for
// every version; a v that does not parse is older than any min.
func VersionAtLeast(v, min string) bool {
	if min == "" {
		return true
	}
	a, okA := parseVersion(v)
	b, okB := parseVersion(min)
	return okA && okB && compareVersions(a, b) >= 0
}

type version struct {
	core [3]uint64
	pre  []string
}

func parseVersion(s string) (version, bool) {
	var v version
	s, _, _ = strings.Cut(s, "+")
	core, pre, hasPre := strings.Cut(s, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return v, false
		}
		v.core[i] = n
	}
	if hasPre {
		v.pre = strings.Split(pre, ".")
	}
	return v, true
}

func compareVersions(a, b version) int {
	for i := range a.core {
		if c := cmp.Compare(a.core[i], b.core[i]); c != 0 {
			return c
		}
	}
	switch {
	case len(a.pre) == 0 && len(b.pre) == 0:
		return 0
	case len(a.pre) == 0:
		return 1
	case len(b.pre) == 0:
		return -1
	}
	for i := 0; i < len(a.pre) && i < len(b.pre); i++ {
		x, errX := strconv.ParseUint(a.pre[i], 10, 64)
		y, errY := strconv.ParseUint(b.pre[i], 10, 64)
		var c int
		switch {
		case errX == nil && errY == nil:
			c = cmp.Compare(x, y)
		case errX == nil:
			c = -1 // numeric identifiers sort before alphanumeric ones
		case errY == nil:
			c = 1
		default:
			c = strings.Compare(a.pre[i], b.pre[i])
		}
		if c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a.pre), len(b.pre))
}
