package streams

import (
	"encoding/json"

	"github.com/nats-io/nats.go/jetstream"
)

// pubAckReply is a JetStream publish's answer: an acknowledgement, or an
// error in its "error" member.
type pubAckReply struct {
	ack jetstream.PubAck
	err *jetstream.APIError
}

// pubAckJSON is pubAckReply as encoding/json reads it: the shape nats.go's
// jetstream client decodes.
type pubAckJSON struct {
	Type  string              `json:"type"`
	Error *jetstream.APIError `json:"error,omitempty"`
	*jetstream.PubAck
}

// parsePubAck decodes a publish's answer as encoding/json decodes it into
// the jetstream client's reply type, without reflection or allocation for
// the answers the server writes (a flat object of the known members, the
// error one nested, no escapes), names as intern returns them.
// Anything else (escapes, nulls, a member name in another case, numbers
// with fractions or exponents, malformed input) goes to encoding/json, so
// the two never differ: FuzzParsePubAck checks it.
func parsePubAck(data []byte, intern func([]byte) string) (pubAckReply, error) {
	if r, ok := fastPubAck(data, intern); ok {
		return r, nil
	}
	var j pubAckJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return pubAckReply{}, err
	}
	var r pubAckReply
	if j.PubAck != nil {
		r.ack = *j.PubAck
	}
	r.err = j.Error
	return r, nil
}

// fastPubAck is parsePubAck's quick path; ok false leaves the answer to
// encoding/json.
func fastPubAck(data []byte, intern func([]byte) string) (r pubAckReply, ok bool) {
	p := scanner{b: data}
	if !p.byte('{') {
		return r, false
	}
	if p.byte('}') {
		return r, p.end()
	}
	for {
		key, ok := p.str()
		if !ok || !p.byte(':') {
			return r, false
		}
		if !p.pubAckMember(key, &r, intern) {
			return r, false
		}
		if p.byte('}') {
			return r, p.end()
		}
		if !p.byte(',') {
			return r, false
		}
	}
}

// pubAckMember reads the value of the member key of a publish's answer
// into r; false leaves the answer to encoding/json.
func (p *scanner) pubAckMember(key []byte, r *pubAckReply, intern func([]byte) string) bool {
	switch string(key) {
	case "stream":
		s, ok := p.str()
		if !ok {
			return false
		}
		r.ack.Stream = intern(s)
	case "domain":
		s, ok := p.str()
		if !ok {
			return false
		}
		r.ack.Domain = intern(s)
	case "val":
		s, ok := p.str()
		if !ok {
			return false
		}
		r.ack.Value = string(s)
	case "seq":
		n, ok := p.uint(^uint64(0))
		if !ok {
			return false
		}
		r.ack.Sequence = n
	case "duplicate":
		b, ok := p.bool()
		if !ok {
			return false
		}
		r.ack.Duplicate = b
	case "type":
		if _, ok := p.str(); !ok {
			return false
		}
	case "error":
		// A second "error" member fills the first one's value, as
		// encoding/json does.
		e, ok := p.apiError(r.err, intern)
		if !ok {
			return false
		}
		r.err = e
	default:
		if !known(key) || !p.skip(0) {
			// A name in another case matches a member for
			// encoding/json: let it decide.
			return false
		}
	}
	return true
}

// apiError reads the "error" member's object. Its description is usually
// one of a few texts ("wrong last sequence: 12" is not): intern keeps the
// repeated ones from allocating.
func (p *scanner) apiError(e *jetstream.APIError, intern func([]byte) string) (*jetstream.APIError, bool) {
	if !p.byte('{') {
		return nil, false
	}
	if e == nil {
		e = &jetstream.APIError{}
	}
	if p.byte('}') {
		return e, true
	}
	for {
		key, ok := p.str()
		if !ok || !p.byte(':') {
			return nil, false
		}
		switch string(key) {
		case "code":
			n, ok := p.int()
			if !ok {
				return nil, false
			}
			e.Code = n
		case "err_code":
			n, ok := p.uint(1<<16 - 1)
			if !ok {
				return nil, false
			}
			e.ErrorCode = jetstream.ErrorCode(n)
		case "description":
			s, ok := p.str()
			if !ok {
				return nil, false
			}
			e.Description = intern(s)
		default:
			if !knownInError(key) || !p.skip(0) {
				return nil, false
			}
		}
		if p.byte('}') {
			return e, true
		}
		if !p.byte(',') {
			return nil, false
		}
	}
}

// known reports whether key is a member name encoding/json matches to no
// field of the reply (its match ignores case).
func known(key []byte) bool {
	for _, f := range [...]string{"stream", "domain", "seq", "duplicate", "val", "error", "type"} {
		if equalFold(key, f) {
			return false
		}
	}
	return true
}

func knownInError(key []byte) bool {
	for _, f := range [...]string{"code", "err_code", "description"} {
		if equalFold(key, f) {
			return false
		}
	}
	return true
}

// equalFold is an ASCII case-insensitive comparison, and refuses any byte
// outside ASCII: encoding/json folds some of those (the Kelvin sign folds
// to k), and a name holding one goes to encoding/json.
func equalFold(b []byte, s string) bool {
	for _, c := range b {
		if c >= 0x80 {
			return true
		}
	}
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// scanner reads JSON tokens from b, skipping white space before each.
type scanner struct {
	b []byte
	i int
}

func (p *scanner) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// byte consumes c if it comes next.
func (p *scanner) byte(c byte) bool {
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end reports whether nothing but white space is left.
func (p *scanner) end() bool {
	p.ws()
	return p.i == len(p.b)
}

// str reads a string without escapes and of printable ASCII or valid
// UTF-8 only; anything else is for encoding/json.
func (p *scanner) str() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			return s, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			// Escapes, control characters and non-ASCII (which
			// encoding/json checks and may replace) are its to read.
			return nil, false
		}
		p.i++
	}
	return nil, false
}

// uint reads an unsigned integer no greater than limit, in JSON's form
// (no leading zeros, no sign, fraction or exponent).
func (p *scanner) uint(limit uint64) (uint64, bool) {
	p.ws()
	start := p.i
	var n uint64
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		d := uint64(p.b[p.i] - '0')
		if n > (limit-d)/10 {
			return 0, false
		}
		n = n*10 + d
		p.i++
	}
	digits := p.i - start
	if digits == 0 || (digits > 1 && p.b[start] == '0') {
		return 0, false
	}
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case '.', 'e', 'E', '-', '+':
			return 0, false
		}
	}
	return n, true
}

// int reads a signed integer in an int's range.
func (p *scanner) int() (int, bool) {
	p.ws()
	neg := p.i < len(p.b) && p.b[p.i] == '-'
	if neg {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] < '0' || p.b[p.i] > '9') {
			return 0, false
		}
	}
	const maxInt = uint64(^uint(0) >> 1)
	limit := maxInt
	if neg {
		limit++
	}
	n, ok := p.uint(limit)
	if !ok {
		return 0, false
	}
	if neg {
		return int(-n), true
	}
	return int(n), true
}

func (p *scanner) bool() (bool, bool) {
	p.ws()
	switch {
	case hasPrefix(p.b[p.i:], "true"):
		p.i += 4
		return true, true
	case hasPrefix(p.b[p.i:], "false"):
		p.i += 5
		return false, true
	}
	return false, false
}

func hasPrefix(b []byte, s string) bool { return len(b) >= len(s) && string(b[:len(s)]) == s }

// skip skips one value of a member no field takes: a string, number,
// literal, object or array, at most 16 deep. It checks less than
// encoding/json does of what it skips, so it refuses what it is unsure
// of: strings with escapes, and numbers other than plain integers.
func (p *scanner) skip(depth int) bool {
	if depth > 16 {
		return false
	}
	p.ws()
	if p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '"':
		_, ok := p.str()
		return ok
	case c == '{':
		p.i++
		if p.byte('}') {
			return true
		}
		for {
			if _, ok := p.str(); !ok || !p.byte(':') || !p.skip(depth+1) {
				return false
			}
			if p.byte('}') {
				return true
			}
			if !p.byte(',') {
				return false
			}
		}
	case c == '[':
		p.i++
		if p.byte(']') {
			return true
		}
		for {
			if !p.skip(depth + 1) {
				return false
			}
			if p.byte(']') {
				return true
			}
			if !p.byte(',') {
				return false
			}
		}
	case c == '-' || ('0' <= c && c <= '9'):
		_, ok := p.int()
		return ok
	case c == 't' || c == 'f':
		_, ok := p.bool()
		return ok
	case hasPrefix(p.b[p.i:], "null"):
		p.i += 4
		return true
	}
	return false
}
