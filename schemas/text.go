package schemas

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// TextProblems lists the strings of the JSON document data — values and
// object keys, at any depth — that PostgreSQL cannot store: a NUL character
// (\u0000, which neither text nor jsonb holds), a lone UTF-16 surrogate
// escape (\ud800 without its other half) and bytes that are not UTF-8.
// Go's decoder turns the last two into U+FFFD silently, so this reads the
// bytes themselves. Each problem names the path of the value ("payload.note",
// "event_id", "payload.items[2]"), one problem per path. data must be valid
// JSON (decode it first); an invalid document yields no problems.
func TextProblems(data []byte) []Problem {
	w := textWalker{data: data}
	w.value("")
	return w.problems
}

// ValidText reports whether s is text PostgreSQL can store: UTF-8 without
// NUL characters. It is for text that does not come as JSON (a header).
func ValidText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

type textWalker struct {
	data     []byte
	pos      int
	problems []Problem
}

func (w *textWalker) space() {
	for w.pos < len(w.data) {
		switch w.data[w.pos] {
		case ' ', '\t', '\n', '\r':
			w.pos++
		default:
			return
		}
	}
}

// value walks the value at w.pos, whose path is path.
func (w *textWalker) value(path string) {
	w.space()
	if w.pos >= len(w.data) {
		return
	}
	switch w.data[w.pos] {
	case '{':
		w.pos++
		for {
			w.space()
			if w.pos >= len(w.data) || w.data[w.pos] == '}' {
				w.pos++
				return
			}
			if w.data[w.pos] == ',' {
				w.pos++
				continue
			}
			key, problem := w.str()
			child := key
			if path != "" {
				child = path + "." + key
			}
			if problem != "" {
				w.add(child, "the key "+problem)
			}
			w.space()
			if w.pos < len(w.data) && w.data[w.pos] == ':' {
				w.pos++
			}
			w.value(child)
		}
	case '[':
		w.pos++
		for i := 0; ; {
			w.space()
			if w.pos >= len(w.data) || w.data[w.pos] == ']' {
				w.pos++
				return
			}
			if w.data[w.pos] == ',' {
				w.pos++
				i++
				continue
			}
			w.value(path + "[" + strconv.Itoa(i) + "]")
		}
	case '"':
		if _, problem := w.str(); problem != "" {
			w.add(path, problem)
		}
	default:
		// A number, true, false or null: up to the next delimiter.
		for w.pos < len(w.data) && !strings.ContainsRune(",]} \t\r\n", rune(w.data[w.pos])) {
			w.pos++
		}
	}
}

func (w *textWalker) add(path, message string) {
	for _, p := range w.problems {
		if p.Field == path {
			return
		}
	}
	w.problems = append(w.problems, Problem{Field: path, Message: message})
}

// str reads the string at w.pos and returns it (decoded loosely, for a
// path) with what is wrong with it, if anything.
func (w *textWalker) str() (string, string) {
	w.pos++ // the opening quote
	var (
		b       strings.Builder
		problem string
	)
	note := func(p string) {
		if problem == "" {
			problem = p
		}
	}
	for w.pos < len(w.data) {
		c := w.data[w.pos]
		switch {
		case c == '"':
			w.pos++
			return b.String(), problem
		case c == '\\' && w.pos+1 < len(w.data):
			if w.data[w.pos+1] != 'u' {
				b.WriteByte(w.data[w.pos+1])
				w.pos += 2
				continue
			}
			r, ok := w.hex(w.pos + 2)
			w.pos += 6
			switch {
			case !ok:
			case r == 0:
				note(`holds a NUL character (\u0000), which PostgreSQL cannot store; remove it`)
			case r >= 0xd800 && r < 0xdc00:
				low, ok := w.hex(w.pos + 2)
				if ok && w.pos+1 < len(w.data) && w.data[w.pos] == '\\' && w.data[w.pos+1] == 'u' && low >= 0xdc00 && low < 0xe000 {
					w.pos += 6
					b.WriteRune(0x10000 + (r-0xd800)<<10 + (low - 0xdc00))
					continue
				}
				note(`holds a lone UTF-16 surrogate (\u` + strconv.FormatInt(int64(r), 16) +
					` without its other half), which is no character; escape both halves of the pair, or send the character as UTF-8`)
			case r >= 0xdc00 && r < 0xe000:
				note(`holds a lone UTF-16 surrogate (\u` + strconv.FormatInt(int64(r), 16) +
					` without its other half), which is no character; escape both halves of the pair, or send the character as UTF-8`)
			default:
				b.WriteRune(r)
			}
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			w.pos++
		default:
			r, size := utf8.DecodeRune(w.data[w.pos:])
			if r == utf8.RuneError && size <= 1 {
				note("is not valid UTF-8; send text encoded as UTF-8")
				size = 1
			}
			b.WriteRune(r)
			w.pos += size
		}
	}
	return b.String(), problem
}

// hex reads the four hex digits at i as a rune.
func (w *textWalker) hex(i int) (rune, bool) {
	if i+4 > len(w.data) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(w.data[i:i+4]), 16, 32)
	return rune(n), err == nil
}

// OutputProblems says what in a handler's output, a JSON document,
// PostgreSQL cannot store (see [TextProblems]), each named by its path
// under "output" ("output.note holds a NUL character …"), or "" when it can
// store all of it.
func OutputProblems(output []byte) string {
	problems := TextProblems(output)
	names := make([]string, len(problems))
	for i, p := range problems {
		p.Field = strings.TrimSuffix("output."+p.Field, ".")
		names[i] = p.String()
	}
	return strings.Join(names, "; ")
}
