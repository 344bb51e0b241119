package bare

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// Errors of the JSON transcoder.
var (
	// ErrUnknownType is returned for a type name the schema lacks.
	ErrUnknownType = errors.New("bare: unknown type")
	// ErrJSON is matched by every *JSONError.
	ErrJSON = errors.New("bare: JSON does not match the schema")
)

// JSONError reports JSON input that does not fit the schema, naming the
// path of the offending value ("$.orders[2].quantity").
type JSONError struct {
	Path string
	Msg  string
}

func (e *JSONError) Error() string { return e.Path + ": " + e.Msg }

// Unwrap lets callers match ErrJSON.
func (e *JSONError) Unwrap() error { return ErrJSON }

// Transcoder converts between JSON and BARE for the types of one schema,
// without generated code. The JSON mapping:
//
//	struct          object keyed by field name; every field required, no others
//	union           {"Member": value}, Member being the member's type name
//	                ("Customer", "str", "void"), or its decimal tag for
//	                anonymous aggregates (any member may be given by tag)
//	enum            the value's name
//	optional        null or the value
//	void            null
//	data, data[N]   standard base64 string
//	integers        numbers, always (exact decimal digits); 64-bit kinds also
//	                accept decimal strings on input
//	f32, f64        numbers (NaN and infinities have no JSON form)
//	list            array
//	map             object; non-str keys as their decimal or text form
//
// A Transcoder is immutable and safe for concurrent use.
type Transcoder struct {
	schema *Schema
	cfg    Config
}

// NewTranscoder returns a Transcoder for s that decodes BARE within cfg's
// limits (zero fields mean defaults).
func NewTranscoder(s *Schema, cfg Config) *Transcoder {
	if cfg.Validate() != nil {
		cfg = DefaultConfig()
	}
	cfg = cfg.withDefaults()
	cfg.ZeroCopy = true // data is only read, never retained
	return &Transcoder{schema: s, cfg: cfg}
}

func (tc *Transcoder) lookup(typeName string) (*Type, error) {
	td, ok := tc.schema.Lookup(typeName)
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownType, typeName)
	}
	if Resolve(td.Type).Kind == KindVoid {
		return nil, fmt.Errorf("%w: %s is void and is only encoded inside a union", ErrUnknownType, typeName)
	}
	return td.Type, nil
}

// BAREToJSON decodes msg, which must hold exactly one value of the named
// type, and returns it as compact JSON.
func (tc *Transcoder) BAREToJSON(typeName string, msg []byte) ([]byte, error) {
	t, err := tc.lookup(typeName)
	if err != nil {
		return nil, err
	}
	w := &jsonWriter{d: NewDecoder(msg, tc.cfg)}
	w.value(t)
	if err := w.d.Finish(); err != nil {
		return nil, err
	}
	return w.out, nil
}

// JSONToBARE encodes the JSON value js as the named type.
func (tc *Transcoder) JSONToBARE(typeName string, js []byte) ([]byte, error) {
	t, err := tc.lookup(typeName)
	if err != nil {
		return nil, err
	}
	// JSON spells a message out at most a few times larger than BARE
	// (base64, decimal digits, field names); refuse input far beyond that
	// before building a tree of it.
	if limit := 8 * tc.cfg.MaxMessageBytes; len(js) > limit {
		return nil, fmt.Errorf("%w: JSON input of %d bytes exceeds %d", ErrLimit, len(js), limit)
	}
	n, err := parseJSON(js, tc.cfg.MaxDepth)
	if err != nil {
		return nil, err
	}
	e := &jsonEncoder{}
	out, err := e.value(nil, t, n)
	if err != nil {
		return nil, err
	}
	if len(out) > tc.cfg.MaxMessageBytes {
		return nil, fmt.Errorf("%w: encoded message of %d bytes exceeds %d", ErrLimit, len(out), tc.cfg.MaxMessageBytes)
	}
	return out, nil
}

// memberName is the JSON key of a union member.
func memberName(m Member) string {
	switch m.Type.Kind {
	case KindNamed:
		return m.Type.Name
	case KindStruct, KindUnion, KindList, KindMap, KindOptional:
		return strconv.FormatUint(m.Tag, 10)
	case KindData:
		if m.Type.Len > 0 {
			return strconv.FormatUint(m.Tag, 10)
		}
	}
	return m.Type.Kind.String()
}

// ---- BARE to JSON ----

type jsonWriter struct {
	d   *Decoder
	out []byte
}

func (w *jsonWriter) value(t *Type) {
	d := w.d
	if d.Err() != nil {
		return
	}
	switch t.Kind {
	case KindUint, KindU64:
		// Always a number, whatever its size: a reply's JSON type must
		// not depend on the value. The digits are exact; a client that
		// reads numbers as doubles (JavaScript) loses precision beyond
		// 2^53, as it would in any JSON with 64-bit integers.
		var v uint64
		if t.Kind == KindUint {
			v = d.Uint()
		} else {
			v = d.U64()
		}
		w.out = strconv.AppendUint(w.out, v, 10)
	case KindInt, KindI64:
		var v int64
		if t.Kind == KindInt {
			v = d.Int()
		} else {
			v = d.I64()
		}
		w.out = strconv.AppendInt(w.out, v, 10)
	case KindU8:
		w.out = strconv.AppendUint(w.out, uint64(d.U8()), 10)
	case KindU16:
		w.out = strconv.AppendUint(w.out, uint64(d.U16()), 10)
	case KindU32:
		w.out = strconv.AppendUint(w.out, uint64(d.U32()), 10)
	case KindI8:
		w.out = strconv.AppendInt(w.out, int64(d.I8()), 10)
	case KindI16:
		w.out = strconv.AppendInt(w.out, int64(d.I16()), 10)
	case KindI32:
		w.out = strconv.AppendInt(w.out, int64(d.I32()), 10)
	case KindF32, KindF64:
		off := d.Offset()
		var f float64
		bits := 64
		if t.Kind == KindF32 {
			f, bits = float64(d.F32()), 32
		} else {
			f = d.F64()
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			d.Fail(off, ErrInvalidValue, fmt.Sprintf("%v has no JSON form", f))
			return
		}
		w.out = strconv.AppendFloat(w.out, f, 'g', -1, bits)
	case KindBool:
		w.out = strconv.AppendBool(w.out, d.Bool())
	case KindStr:
		w.out = appendJSONString(w.out, d.Str())
	case KindData:
		var b []byte
		if t.Len > 0 {
			b = d.Bytes(t.Len)
		} else {
			b = d.Data(nil)
		}
		if d.Err() != nil {
			return
		}
		w.out = append(w.out, '"')
		w.out = base64.StdEncoding.AppendEncode(w.out, b)
		w.out = append(w.out, '"')
	case KindVoid:
		w.out = append(w.out, "null"...)
	case KindEnum:
		off := d.Offset()
		v := d.Uint()
		if d.Err() != nil {
			return
		}
		for _, ev := range t.Values {
			if ev.Value == v {
				w.out = appendJSONString(w.out, ev.Name)
				return
			}
		}
		d.Fail(off, ErrUnknownEnum, fmt.Sprintf("value %d", v))
	case KindOptional:
		if d.Optional() {
			w.value(t.Elem)
		} else if d.Err() == nil {
			w.out = append(w.out, "null"...)
		}
	case KindList:
		if !d.Enter() {
			return
		}
		n := t.Len
		if n == 0 {
			n = d.Count(MinSize(t.Elem))
		}
		w.out = append(w.out, '[')
		for i := 0; i < n && d.Err() == nil; i++ {
			if i > 0 {
				w.out = append(w.out, ',')
			}
			w.value(t.Elem)
		}
		w.out = append(w.out, ']')
		d.Leave()
	case KindMap:
		if !d.Enter() {
			return
		}
		n := d.Count(MinSize(t.Key) + MinSize(t.Elem))
		seen := make(map[string]struct{}, n)
		w.out = append(w.out, '{')
		for i := 0; i < n && d.Err() == nil; i++ {
			if i > 0 {
				w.out = append(w.out, ',')
			}
			off := d.Offset()
			w.mapKey(t.Key)
			if d.Err() != nil {
				break
			}
			raw := string(d.buf[off:d.Offset()])
			if _, dup := seen[raw]; dup {
				d.DuplicateKey(off)
				break
			}
			seen[raw] = struct{}{}
			w.out = append(w.out, ':')
			w.value(t.Elem)
		}
		w.out = append(w.out, '}')
		d.Leave()
	case KindUnion:
		if !d.Enter() {
			return
		}
		off := d.Offset()
		tag := d.Uint()
		if d.Err() != nil {
			return
		}
		for _, m := range t.Members {
			if m.Tag == tag {
				w.out = append(w.out, '{')
				w.out = appendJSONString(w.out, memberName(m))
				w.out = append(w.out, ':')
				w.value(m.Type)
				w.out = append(w.out, '}')
				d.Leave()
				return
			}
		}
		d.UnknownTag(off, "union", tag)
	case KindStruct:
		if !d.Enter() {
			return
		}
		w.out = append(w.out, '{')
		for i, f := range t.Fields {
			if i > 0 {
				w.out = append(w.out, ',')
			}
			w.out = appendJSONString(w.out, f.Name)
			w.out = append(w.out, ':')
			w.value(f.Type)
		}
		w.out = append(w.out, '}')
		d.Leave()
	case KindNamed:
		w.value(t.Def.Type)
	}
}

// mapKey writes a map key as a JSON string.
func (w *jsonWriter) mapKey(t *Type) {
	r := Resolve(t)
	switch r.Kind {
	case KindStr, KindEnum:
		w.value(r)
	default:
		w.out = append(w.out, '"')
		w.value(r)
		w.out = append(w.out, '"')
	}
}

func appendJSONString(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// ---- JSON to BARE ----

type jkind uint8

const (
	jNull jkind = iota
	jBool
	jNum
	jStr
	jArr
	jObj
)

var jkindNames = [...]string{"null", "boolean", "number", "string", "array", "object"}

// jnode is a parsed JSON value that keeps object keys in input order.
type jnode struct {
	kind jkind
	b    bool
	s    string // number text or string value
	arr  []*jnode
	keys []string
	vals []*jnode
}

// jsonEncoder encodes a parsed JSON tree. It tracks where it is as a stack
// of path segments and renders the path only for an error.
type jsonEncoder struct {
	segs []pathSeg
}

type pathSeg struct {
	name string // field or union member; map key when key is set
	idx  int    // list index when name is "" and !key
	key  bool
}

func (e *jsonEncoder) push(s pathSeg) { e.segs = append(e.segs, s) }
func (e *jsonEncoder) pop()           { e.segs = e.segs[:len(e.segs)-1] }

func (e *jsonEncoder) path() string {
	b := []byte("$")
	for _, s := range e.segs {
		switch {
		case s.key:
			b = append(b, '[')
			b = append(b, quoteInput(s.name)...)
			b = append(b, ']')
		case s.name != "":
			b = append(b, '.')
			b = append(b, clipInput(s.name)...)
		default:
			b = append(b, '[')
			b = strconv.AppendInt(b, int64(s.idx), 10)
			b = append(b, ']')
		}
	}
	return string(b)
}

// maxQuotedInput bounds what an error quotes of the input (a number, a
// name, a map key): an error about a value of a megabyte is not a
// megabyte long.
const maxQuotedInput = 64

// clipInput returns s, or its first maxQuotedInput bytes (cut at a rune
// boundary) and "... (N bytes)" when it is longer.
func clipInput(s string) string {
	if len(s) <= maxQuotedInput {
		return s
	}
	return s[:cutAt(s)] + fmt.Sprintf("... (%d bytes)", len(s))
}

// quoteInput is clipInput of a Go-quoted s: the quote holds at most
// maxQuotedInput bytes of it.
func quoteInput(s string) string {
	if len(s) <= maxQuotedInput {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:cutAt(s)]) + fmt.Sprintf("... (%d bytes)", len(s))
}

// cutAt is where clipInput cuts s: at most maxQuotedInput bytes, not
// within a UTF-8 sequence.
func cutAt(s string) int {
	n := maxQuotedInput
	for i := 0; i < utf8.UTFMax && n > 0 && !utf8.RuneStart(s[n]); i++ {
		n--
	}
	return n
}

func (e *jsonEncoder) errf(format string, args ...any) error {
	return &JSONError{Path: e.path(), Msg: fmt.Sprintf(format, args...)}
}

// fieldErr reports an error about the field name of the current object.
func (e *jsonEncoder) fieldErr(name, format string, args ...any) error {
	e.push(pathSeg{name: name})
	defer e.pop()
	return e.errf(format, args...)
}

func (e *jsonEncoder) want(n *jnode, what string) error {
	return e.errf("want %s, got %s", what, jkindNames[n.kind])
}

// intText returns the decimal text of an integer given as a number, or as
// a string when strOK.
func (e *jsonEncoder) intText(n *jnode, strOK bool) (string, error) {
	if n.kind == jNum || n.kind == jStr && strOK {
		return n.s, nil
	}
	if strOK {
		return "", e.want(n, "an integer (number or decimal string)")
	}
	return "", e.want(n, "an integer")
}

func (e *jsonEncoder) parseUint(s string, bits int) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, bits)
	if err != nil {
		return 0, e.errf("%s is not a u%d", quoteInput(s), bits)
	}
	return v, nil
}

func (e *jsonEncoder) parseInt(s string, bits int) (int64, error) {
	v, err := strconv.ParseInt(s, 10, bits)
	if err != nil {
		return 0, e.errf("%s is not an i%d", quoteInput(s), bits)
	}
	return v, nil
}

var intBits = map[Kind]int{
	KindUint: 64, KindU8: 8, KindU16: 16, KindU32: 32, KindU64: 64,
	KindInt: 64, KindI8: 8, KindI16: 16, KindI32: 32, KindI64: 64,
}

func (e *jsonEncoder) value(dst []byte, t *Type, n *jnode) ([]byte, error) {
	switch t.Kind {
	case KindUint, KindU8, KindU16, KindU32, KindU64:
		bits := intBits[t.Kind]
		s, err := e.intText(n, bits == 64)
		if err != nil {
			return nil, err
		}
		v, err := e.parseUint(s, bits)
		if err != nil {
			return nil, err
		}
		switch t.Kind {
		case KindUint:
			return AppendUint(dst, v), nil
		case KindU8:
			return AppendU8(dst, uint8(v)), nil
		case KindU16:
			return AppendU16(dst, uint16(v)), nil
		case KindU32:
			return AppendU32(dst, uint32(v)), nil
		}
		return AppendU64(dst, v), nil
	case KindInt, KindI8, KindI16, KindI32, KindI64:
		bits := intBits[t.Kind]
		s, err := e.intText(n, bits == 64)
		if err != nil {
			return nil, err
		}
		v, err := e.parseInt(s, bits)
		if err != nil {
			return nil, err
		}
		switch t.Kind {
		case KindInt:
			return AppendInt(dst, v), nil
		case KindI8:
			return AppendI8(dst, int8(v)), nil
		case KindI16:
			return AppendI16(dst, int16(v)), nil
		case KindI32:
			return AppendI32(dst, int32(v)), nil
		}
		return AppendI64(dst, v), nil
	case KindF32, KindF64:
		if n.kind != jNum {
			return nil, e.want(n, "a number")
		}
		bits := 64
		if t.Kind == KindF32 {
			bits = 32
		}
		f, err := strconv.ParseFloat(n.s, bits)
		if err != nil {
			return nil, e.errf("%s is not an f%d", clipInput(n.s), bits)
		}
		if bits == 32 {
			return AppendF32(dst, float32(f)), nil
		}
		return AppendF64(dst, f), nil
	case KindBool:
		if n.kind != jBool {
			return nil, e.want(n, "a boolean")
		}
		return AppendBool(dst, n.b), nil
	case KindStr:
		if n.kind != jStr {
			return nil, e.want(n, "a string")
		}
		if !utf8.ValidString(n.s) {
			return nil, e.errf("invalid UTF-8")
		}
		return AppendString(dst, n.s), nil
	case KindData:
		if n.kind != jStr {
			return nil, e.want(n, "a base64 string")
		}
		b, err := base64.StdEncoding.Strict().DecodeString(n.s)
		if err != nil {
			return nil, e.errf("invalid base64: %v", err)
		}
		if t.Len > 0 {
			if len(b) != t.Len {
				return nil, e.errf("want %d bytes, got %d", t.Len, len(b))
			}
			return append(dst, b...), nil
		}
		return AppendData(dst, b), nil
	case KindVoid:
		if n.kind != jNull {
			return nil, e.want(n, "null")
		}
		return dst, nil
	case KindEnum:
		if n.kind != jStr {
			return nil, e.want(n, "an enum value name")
		}
		for _, ev := range t.Values {
			if ev.Name == n.s {
				return AppendUint(dst, ev.Value), nil
			}
		}
		return nil, e.errf("unknown enum value %s", quoteInput(n.s))
	case KindOptional:
		if n.kind == jNull {
			return append(dst, 0), nil
		}
		return e.value(append(dst, 1), t.Elem, n)
	case KindList:
		if n.kind != jArr {
			return nil, e.want(n, "an array")
		}
		if t.Len > 0 {
			if len(n.arr) != t.Len {
				return nil, e.errf("want %d items, got %d", t.Len, len(n.arr))
			}
		} else {
			dst = AppendUint(dst, uint64(len(n.arr)))
		}
		var err error
		for i, c := range n.arr {
			e.push(pathSeg{idx: i})
			if dst, err = e.value(dst, t.Elem, c); err != nil {
				return nil, err
			}
			e.pop()
		}
		return dst, nil
	case KindMap:
		if n.kind != jObj {
			return nil, e.want(n, "an object")
		}
		dst = AppendUint(dst, uint64(len(n.keys)))
		seen := make(map[string]struct{}, len(n.keys))
		var err error
		for i, k := range n.keys {
			e.push(pathSeg{name: k, key: true})
			start := len(dst)
			if dst, err = e.mapKey(dst, t.Key, k); err != nil {
				return nil, err
			}
			raw := string(dst[start:])
			if _, dup := seen[raw]; dup {
				return nil, e.errf("duplicate map key")
			}
			seen[raw] = struct{}{}
			if dst, err = e.value(dst, t.Elem, n.vals[i]); err != nil {
				return nil, err
			}
			e.pop()
		}
		return dst, nil
	case KindUnion:
		if n.kind != jObj || len(n.keys) != 1 {
			return nil, e.errf("want an object with exactly one member name")
		}
		k := n.keys[0]
		for _, m := range t.Members {
			if memberName(m) == k || strconv.FormatUint(m.Tag, 10) == k {
				e.push(pathSeg{name: k})
				out, err := e.value(AppendUint(dst, m.Tag), m.Type, n.vals[0])
				if err != nil {
					return nil, err
				}
				e.pop()
				return out, nil
			}
		}
		return nil, e.errf("unknown union member %s", quoteInput(k))
	case KindStruct:
		if n.kind != jObj {
			return nil, e.want(n, "an object")
		}
		idx := make(map[string]int, len(n.keys))
		for i, k := range n.keys {
			if _, dup := idx[k]; dup {
				return nil, e.fieldErr(k, "duplicate field")
			}
			idx[k] = i
		}
		for _, k := range n.keys {
			if !hasField(t, k) {
				return nil, e.fieldErr(k, "unknown field")
			}
		}
		var err error
		for _, f := range t.Fields {
			i, ok := idx[f.Name]
			if !ok {
				if Resolve(f.Type).Kind == KindOptional {
					dst = append(dst, 0) // left out: absent, like null
					continue
				}
				return nil, e.fieldErr(f.Name, "missing field")
			}
			e.push(pathSeg{name: f.Name})
			if dst, err = e.value(dst, f.Type, n.vals[i]); err != nil {
				return nil, err
			}
			e.pop()
		}
		return dst, nil
	case KindNamed:
		return e.value(dst, t.Def.Type, n)
	}
	return nil, e.errf("unsupported type %v", t.Kind)
}

func hasField(t *Type, name string) bool {
	for _, f := range t.Fields {
		if f.Name == name {
			return true
		}
	}
	return false
}

// mapKey encodes an object key as a map key of type t.
func (e *jsonEncoder) mapKey(dst []byte, t *Type, k string) ([]byte, error) {
	r := Resolve(t)
	switch r.Kind {
	case KindStr, KindEnum:
		return e.value(dst, r, &jnode{kind: jStr, s: k})
	case KindBool:
		switch k {
		case "true", "false":
			return AppendBool(dst, k == "true"), nil
		}
		return nil, e.errf("map key %s is not true or false", quoteInput(k))
	}
	// Integer keys: the decimal form, also for the small kinds.
	s := k
	if intBits[r.Kind] != 64 {
		// Reuse the number path, which accepts only numbers for small kinds.
		return e.value(dst, r, &jnode{kind: jNum, s: s})
	}
	return e.value(dst, r, &jnode{kind: jStr, s: s})
}
