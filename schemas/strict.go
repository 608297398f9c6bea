package schemas

import (
	"bytes"
	"encoding/json"
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
