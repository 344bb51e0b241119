package bare

import (
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// parseJSON parses one JSON value (RFC 8259) into a tree that keeps object
// keys in input order and numbers as their text. It is stricter than
// encoding/json in one way: invalid UTF-8 is an error, not replaced.
func parseJSON(data []byte, maxDepth int) (*jnode, error) {
	p := &jparser{b: data, maxDepth: maxDepth}
	p.ws()
	n, err := p.value(0)
	if err == nil {
		p.ws()
		if p.i != len(p.b) {
			err = p.errf("data after the value")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: invalid JSON: %v", ErrJSON, err)
	}
	return n, nil
}

type jparser struct {
	b        []byte
	i        int
	maxDepth int
}

var errJSONEOF = errors.New("unexpected end of JSON input")

// errUnpairedSurrogate starts the error of a \u escape of a UTF-16
// surrogate not part of a pair.
const errUnpairedSurrogate = "unpaired UTF-16 surrogate"

func (p *jparser) errf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *jparser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jparser) literal(word string) bool {
	if len(p.b)-p.i >= len(word) && string(p.b[p.i:p.i+len(word)]) == word {
		p.i += len(word)
		return true
	}
	return false
}

func (p *jparser) value(depth int) (*jnode, error) {
	if p.i >= len(p.b) {
		return nil, errJSONEOF
	}
	switch c := p.b[p.i]; {
	case c == '{' || c == '[':
		if depth >= p.maxDepth {
			return nil, p.errf("nesting deeper than %d", p.maxDepth)
		}
		return p.aggregate(depth)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return &jnode{kind: jStr, s: s}, nil
	case c == '-' || c >= '0' && c <= '9':
		s, err := p.number()
		if err != nil {
			return nil, err
		}
		return &jnode{kind: jNum, s: s}, nil
	case p.literal("true"):
		return &jnode{kind: jBool, b: true}, nil
	case p.literal("false"):
		return &jnode{kind: jBool}, nil
	case p.literal("null"):
		return &jnode{kind: jNull}, nil
	default:
		return nil, p.errf("unexpected character %q", rune(c))
	}
}

func (p *jparser) aggregate(depth int) (*jnode, error) {
	open := p.b[p.i]
	n := &jnode{kind: jArr}
	closer := byte(']')
	if open == '{' {
		n.kind, closer = jObj, '}'
	}
	p.i++
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == closer {
		p.i++
		return n, nil
	}
	for {
		if n.kind == jObj {
			if p.i >= len(p.b) {
				return nil, errJSONEOF
			}
			if p.b[p.i] != '"' {
				return nil, p.errf("expected an object key")
			}
			k, err := p.str()
			if err != nil {
				return nil, err
			}
			p.ws()
			if p.i >= len(p.b) || p.b[p.i] != ':' {
				return nil, p.errf("expected ':'")
			}
			p.i++
			p.ws()
			n.keys = append(n.keys, k)
		}
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		if n.kind == jObj {
			n.vals = append(n.vals, v)
		} else {
			n.arr = append(n.arr, v)
		}
		p.ws()
		if p.i >= len(p.b) {
			return nil, errJSONEOF
		}
		switch p.b[p.i] {
		case ',':
			p.i++
			p.ws()
		case closer:
			p.i++
			return n, nil
		default:
			return nil, p.errf("expected ',' or %q", closer)
		}
	}
}

func (p *jparser) number() (string, error) {
	start := p.i
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.b[p.i] == '-' {
		p.i++
	}
	if p.i < len(p.b) && p.b[p.i] == '0' {
		p.i++
	} else if digits() == 0 {
		return "", p.errf("invalid number")
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return "", p.errf("invalid number")
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return "", p.errf("invalid number")
		}
	}
	return string(p.b[start:p.i]), nil
}

func hexVal(c byte) rune {
	switch {
	case c >= '0' && c <= '9':
		return rune(c - '0')
	case c >= 'a' && c <= 'f':
		return rune(c - 'a' + 10)
	case c >= 'A' && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

func (p *jparser) hex4() (rune, bool) {
	if len(p.b)-p.i < 4 {
		return 0, false
	}
	var r rune
	for k := 0; k < 4; k++ {
		h := hexVal(p.b[p.i+k])
		if h < 0 {
			return 0, false
		}
		r = r<<4 | h
	}
	p.i += 4
	return r, true
}

// str reads a JSON string starting at its opening quote.
func (p *jparser) str() (string, error) {
	p.i++ // opening quote
	start := p.i
	// Fast path: no escapes.
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			s := p.b[start:p.i]
			if !utf8.Valid(s) {
				return "", p.errf("invalid UTF-8 in string")
			}
			p.i++
			return string(s), nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", p.errf("control character in string")
		}
		p.i++
	}
	buf := append([]byte(nil), p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			if !utf8.Valid(buf) {
				return "", p.errf("invalid UTF-8 in string")
			}
			p.i++
			return string(buf), nil
		case c < 0x20:
			return "", p.errf("control character in string")
		case c != '\\':
			buf = append(buf, c)
			p.i++
			continue
		}
		p.i++
		if p.i >= len(p.b) {
			return "", errJSONEOF
		}
		e := p.b[p.i]
		p.i++
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", p.errf("invalid \\u escape")
			}
			if utf16.IsSurrogate(r) {
				// A high surrogate must be followed by an escaped low one.
				// An unpaired one names no character: refused, where
				// encoding/json would put U+FFFD in its place and so
				// change the string without saying so.
				at := p.i - 6
				if p.literal(`\u`) {
					if r2, ok := p.hex4(); ok {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							buf = utf8.AppendRune(buf, dec)
							break
						}
					}
				}
				p.i = at
				return "", p.errf("%s %s", errUnpairedSurrogate, p.b[at:at+6])
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", p.errf("invalid escape %q", "\\"+string(rune(e)))
		}
	}
	return "", errJSONEOF
}
