package taskdef

import (
	"fmt"
	"strings"

	"github.com/ax-scheduler/ax/schemas"
)

// maxNesting returns the deepest nesting of objects and arrays in data,
// JSON or something like it, and the top-level key under which it is
// found. It reads the bytes once, without decoding them.
func maxNesting(data []byte) (int, string) {
	var (
		depth, deepest int
		inString, esc  bool
		start          int
		lastString     string
		key, deepKey   string
	)
	for i, c := range data {
		if inString {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inString = false
				if depth == 1 {
					lastString = string(data[start:i])
				}
			}
			continue
		}
		switch c {
		case '"':
			inString, start = true, i+1
		case ':':
			if depth == 1 {
				key = lastString
			}
		case '{', '[':
			depth++
			if depth > deepest {
				deepest, deepKey = depth, key
			}
		case '}', ']':
			depth--
		}
	}
	return deepest, deepKey
}

// nulProblems names every string of doc, a decoded JSON value at path,
// that holds a NUL character: PostgreSQL can store none in text or jsonb.
func nulProblems(doc any, path string) []schemas.Problem {
	var out []schemas.Problem
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch v := doc.(type) {
	case string:
		if strings.ContainsRune(v, 0) {
			out = append(out, schemas.Problem{Field: path, Message: "holds a NUL character (\\u0000), which AX cannot store; remove it"})
		}
	case map[string]any:
		for k, e := range v {
			if strings.ContainsRune(k, 0) {
				out = append(out, schemas.Problem{Field: path, Message: "has a key that holds a NUL character (\\u0000), which AX cannot store; remove it"})
			}
			out = append(out, nulProblems(e, join(k))...)
		}
	case []any:
		for i, e := range v {
			out = append(out, nulProblems(e, fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	return out
}
