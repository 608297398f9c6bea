package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DuplicateKey returns the path of the first key that an object of data,
// one valid JSON value, holds twice ("execution.handler",
// "triggers[0].schedule"), and false when none does. YAML refuses a
// repeated key, and JSON parsers disagree on which of the two wins, so AX
// refuses it in JSON too. It takes time linear in the size of data.
func DuplicateKey(data []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var path []string
	found, err := duplicateIn(dec, &path)
	if err != nil || !found {
		return "", false
	}
	return strings.TrimPrefix(strings.Join(path, ""), "."), true
}

// duplicateIn reads one value from dec and reports whether an object in
// it repeats a key; path holds the segments (".key", "[i]") that lead to
// the value, and on a find, to the repeated key. Paths are joined only
// then, so that a deep document costs no more than its size.
func duplicateIn(dec *json.Decoder, path *[]string) (bool, error) {
	tok, err := dec.Token()
	if err != nil {
		return false, err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return false, err
			}
			k, _ := kt.(string)
			*path = append(*path, "."+k)
			if seen[k] {
				return true, nil
			}
			seen[k] = true
			if found, err := duplicateIn(dec, path); found || err != nil {
				return found, err
			}
			*path = (*path)[:len(*path)-1]
		}
		_, err = dec.Token()
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			*path = append(*path, "["+strconv.Itoa(i)+"]")
			if found, err := duplicateIn(dec, path); found || err != nil {
				return found, err
			}
			*path = (*path)[:len(*path)-1]
		}
		_, err = dec.Token()
	}
	return false, err
}

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
func nulProblems(doc any, path string) []Problem {
	var out []Problem
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch v := doc.(type) {
	case string:
		if strings.ContainsRune(v, 0) {
			out = append(out, Problem{path, "holds a NUL character (\\u0000), which AX cannot store; remove it"})
		}
	case map[string]any:
		for k, e := range v {
			if strings.ContainsRune(k, 0) {
				out = append(out, Problem{path, "has a key that holds a NUL character (\\u0000), which AX cannot store; remove it"})
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

// EarliestTime is the earliest fired_at or run_at a trigger event may
// carry. A firing from 1970 or year 1 is no firing AX made or could have
// been asked for: it only skews the scheduling delay measured from it.
var EarliestTime = time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)

// timeBoundProblems refuses the times of ev before EarliestTime.
func (ev *TriggerEvent) timeBoundProblems() []Problem {
	var out []Problem
	for _, f := range []struct {
		name string
		t    time.Time
	}{{"fired_at", ev.FiredAt}, {"run_at", ev.RunAt}} {
		if !f.t.IsZero() && f.t.Before(EarliestTime) {
			out = append(out, Problem{f.name, "must not be before 2000-01-01T00:00:00Z; leave it out for now"})
		}
	}
	return out
}
