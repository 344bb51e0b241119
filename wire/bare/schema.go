package bare

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Kind is the kind of a schema type.
type Kind int

// The kinds of BARE types. KindNamed refers to a user type by name.
const (
	KindUint Kind = iota + 1
	KindInt
	KindU8
	KindU16
	KindU32
	KindU64
	KindI8
	KindI16
	KindI32
	KindI64
	KindF32
	KindF64
	KindBool
	KindStr
	KindData // Len > 0 means data[Len]
	KindVoid
	KindEnum
	KindOptional
	KindList // Len > 0 means list<T>[Len]
	KindMap
	KindUnion
	KindStruct
	KindNamed
)

var primitiveNames = map[string]Kind{
	"uint": KindUint, "int": KindInt,
	"u8": KindU8, "u16": KindU16, "u32": KindU32, "u64": KindU64,
	"i8": KindI8, "i16": KindI16, "i32": KindI32, "i64": KindI64,
	"f32": KindF32, "f64": KindF64, "bool": KindBool, "str": KindStr,
	"data": KindData, "void": KindVoid,
}

var kindNames = map[Kind]string{}

func init() {
	for n, k := range primitiveNames {
		kindNames[k] = n
	}
	kindNames[KindEnum] = "enum"
	kindNames[KindOptional] = "optional"
	kindNames[KindList] = "list"
	kindNames[KindMap] = "map"
	kindNames[KindUnion] = "union"
	kindNames[KindStruct] = "struct"
	kindNames[KindNamed] = "named"
}

func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Pos is a position in a schema source.
type Pos struct {
	File      string
	Line, Col int
}

func (p Pos) String() string {
	f := p.File
	if f == "" {
		f = "schema"
	}
	return fmt.Sprintf("%s:%d:%d", f, p.Line, p.Col)
}

// Type is one type expression of a schema. Which fields are set depends on
// Kind. Types are immutable after ParseSchema returns and may be shared by
// goroutines.
type Type struct {
	Kind Kind
	Pos  Pos
	// Len is N for data[N] and list<T>[N]; 0 means variable length.
	Len int
	// Elem is the element of optional and list, and the value of map.
	Elem *Type
	// Key is the key type of a map.
	Key *Type
	// Fields of a struct, in wire order.
	Fields []Field
	// Members of a union, in declaration order.
	Members []Member
	// Values of an enum, in declaration order.
	Values []EnumValue
	// Name is the referenced user type of KindNamed.
	Name string
	// Def is the definition Name resolves to (set by ParseSchema).
	Def *TypeDef
}

// Field is one struct field.
type Field struct {
	Name string
	Type *Type
	Pos  Pos
}

// Member is one union member and its tag.
type Member struct {
	Tag  uint64
	Type *Type
	Pos  Pos
}

// EnumValue is one enum constant.
type EnumValue struct {
	Name  string
	Value uint64
	Pos   Pos
}

// TypeDef is one `type Name ...` declaration.
type TypeDef struct {
	Name string
	Type *Type
	Pos  Pos
	// Tag is the message tag declared for the type by a "# @tag N"
	// comment on the line before it (0: none). Tags are unique within a
	// schema and in [1, MaxTag]. The comment keeps the schema plain BARE
	// for other tools; baregen turns it into the type's MessageTag method,
	// so an application declares each tag once, here.
	Tag uint32
}

// MaxTag is the largest tag a "# @tag" annotation may declare; larger
// ones are reserved for the mail protocol's own frames.
const MaxTag uint32 = 0xFFFF_FF00

// tagDirective starts a comment that declares the next type's tag.
const tagDirective = "@tag"

// Schema is a parsed, validated BARE schema.
type Schema struct {
	// Types in declaration order.
	Types  []*TypeDef
	byName map[string]*TypeDef
}

// Lookup returns the definition of the user type name.
func (s *Schema) Lookup(name string) (*TypeDef, bool) {
	td, ok := s.byName[name]
	return td, ok
}

// SchemaError is a schema syntax or semantic error at a position.
type SchemaError struct {
	Pos Pos
	Msg string
}

func (e *SchemaError) Error() string { return e.Pos.String() + ": " + e.Msg }

// Unwrap lets callers match ErrSchema.
func (e *SchemaError) Unwrap() error { return ErrSchema }

// ErrSchema is matched by every *SchemaError.
var ErrSchema = errors.New("bare: invalid schema")

// ParseSchemaFile reads and parses the schema in path.
func ParseSchemaFile(path string) (*Schema, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseSchema(path, src)
}

// maxFixedLen bounds data[N] and list<T>[N] so generated Go arrays and
// decoders stay reasonable.
const maxFixedLen = 1 << 24

// ParseSchema parses and validates the schema source src; file names the
// source in errors ("file:line:col: message").
func ParseSchema(file string, src []byte) (*Schema, error) {
	p := &parser{lx: lexer{file: file, src: src, line: 1, col: 1}}
	s := &Schema{byName: map[string]*TypeDef{}}
	tags := map[uint32]*TypeDef{}
	err := p.catch(func() {
		p.next()
		for p.tok.kind != tEOF {
			td := p.typeDef()
			if prev, dup := s.byName[td.Name]; dup {
				p.failAt(td.Pos, "type %s redeclared (first declared at %s)", td.Name, prev.Pos)
			}
			s.byName[td.Name] = td
			s.Types = append(s.Types, td)
			if td.Tag != 0 {
				if prev, dup := tags[td.Tag]; dup {
					p.failAt(td.Pos, "message tag %d of %s is already %s's (%s)", td.Tag, td.Name, prev.Name, prev.Pos)
				}
				tags[td.Tag] = td
			}
		}
		p.check(s)
		for _, td := range s.Types {
			if td.Tag != 0 && isUnion(td.Type) {
				p.failAt(td.Pos, "union %s cannot carry a %s annotation: tag its members, which are registered one by one", td.Name, tagDirective)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// isUnion reports whether t is a union, directly or through named
// types (resolved by check; their cycles were refused there).
func isUnion(t *Type) bool {
	for t.Kind == KindNamed && t.Def != nil {
		t = t.Def.Type
	}
	return t.Kind == KindUnion
}

type tokKind int

const (
	tEOF tokKind = iota
	tIdent
	tInt
	tPunct
)

type token struct {
	kind tokKind
	text string
	pos  Pos
}

type lexer struct {
	file      string
	src       []byte
	off       int
	line, col int
}

type parser struct {
	lx  lexer
	tok token
	// annot is a "# @tag N" seen since the last token: the next token
	// must start the type declaration it belongs to.
	annot *annotation
}

type annotation struct {
	tag uint32
	pos Pos
}

type schemaPanic struct{ err *SchemaError }

func (p *parser) catch(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			sp, ok := r.(schemaPanic)
			if !ok {
				panic(r)
			}
			err = sp.err
		}
	}()
	f()
	return nil
}

func (p *parser) failAt(pos Pos, format string, args ...any) {
	panic(schemaPanic{&SchemaError{Pos: pos, Msg: fmt.Sprintf(format, args...)}})
}

func (lx *lexer) pos() Pos { return Pos{File: lx.file, Line: lx.line, Col: lx.col} }

func (lx *lexer) advance() {
	if lx.src[lx.off] == '\n' {
		lx.line++
		lx.col = 1
	} else {
		lx.col++
	}
	lx.off++
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }

func (p *parser) next() {
	p.lex()
	if p.annot != nil && (p.tok.kind != tIdent || p.tok.text != "type") {
		p.failAt(p.annot.pos, "a %s annotation must come right before a type declaration", tagDirective)
	}
}

func (p *parser) lex() {
	lx := &p.lx
	for lx.off < len(lx.src) {
		c := lx.src[lx.off]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			lx.advance()
			continue
		case c == '#':
			cpos, start := lx.pos(), lx.off
			for lx.off < len(lx.src) && lx.src[lx.off] != '\n' {
				lx.advance()
			}
			p.directive(cpos, string(lx.src[start+1:lx.off]))
			continue
		}
		break
	}
	pos := lx.pos()
	if lx.off >= len(lx.src) {
		p.tok = token{kind: tEOF, pos: pos}
		return
	}
	start := lx.off
	c := lx.src[lx.off]
	switch {
	case isLetter(c) || c == '_':
		for lx.off < len(lx.src) && (isLetter(lx.src[lx.off]) || isDigit(lx.src[lx.off]) || lx.src[lx.off] == '_') {
			lx.advance()
		}
		p.tok = token{kind: tIdent, text: string(lx.src[start:lx.off]), pos: pos}
	case isDigit(c):
		for lx.off < len(lx.src) && (isDigit(lx.src[lx.off]) || isLetter(lx.src[lx.off])) {
			lx.advance()
		}
		p.tok = token{kind: tInt, text: string(lx.src[start:lx.off]), pos: pos}
	case strings.IndexByte("{}<>[]|=:", c) >= 0:
		lx.advance()
		p.tok = token{kind: tPunct, text: string(c), pos: pos}
	default:
		p.failAt(pos, "unexpected character %q", rune(c))
	}
}

// directive parses a comment's text (after the '#'): "@tag N" declares
// the tag of the type declared next; any other comment is ignored.
func (p *parser) directive(pos Pos, text string) {
	f := strings.Fields(text)
	if len(f) == 0 || f[0] != tagDirective {
		return
	}
	if p.annot != nil {
		p.failAt(pos, "a second %s annotation for one type (first at %s)", tagDirective, p.annot.pos)
	}
	if len(f) != 2 {
		p.failAt(pos, "want \"# %s N\", found %q", tagDirective, "#"+text)
	}
	v, err := strconv.ParseUint(f[1], 10, 32)
	if err != nil || v == 0 || v > uint64(MaxTag) || (len(f[1]) > 1 && f[1][0] == '0') {
		p.failAt(pos, "message tag %q: want a decimal number in [1, %d]", f[1], MaxTag)
	}
	p.annot = &annotation{tag: uint32(v), pos: pos}
}

func (p *parser) describe() string {
	switch p.tok.kind {
	case tEOF:
		return "end of file"
	case tInt:
		return "number " + p.tok.text
	default:
		return strconv.Quote(p.tok.text)
	}
}

func (p *parser) expect(punct string) Pos {
	if p.tok.kind != tPunct || p.tok.text != punct {
		p.failAt(p.tok.pos, "expected %q, found %s", punct, p.describe())
	}
	pos := p.tok.pos
	p.next()
	return pos
}

func (p *parser) is(punct string) bool { return p.tok.kind == tPunct && p.tok.text == punct }

func (p *parser) integer(what string, max uint64) uint64 {
	if p.tok.kind != tInt {
		p.failAt(p.tok.pos, "expected %s, found %s", what, p.describe())
	}
	v, err := strconv.ParseUint(p.tok.text, 10, 64)
	if err != nil || v > max {
		p.failAt(p.tok.pos, "invalid %s %s", what, p.tok.text)
	}
	p.next()
	return v
}

// User type names: UPPER *(ALPHA / DIGIT).
func validTypeName(s string) bool {
	if s == "" || s[0] < 'A' || s[0] > 'Z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isLetter(s[i]) && !isDigit(s[i]) {
			return false
		}
	}
	return true
}

// Field names: ALPHA *(ALPHA / DIGIT).
func validFieldName(s string) bool {
	if s == "" || !isLetter(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isLetter(s[i]) && !isDigit(s[i]) {
			return false
		}
	}
	return true
}

// Enum value names: UPPER *(UPPER / DIGIT / "_").
func validEnumName(s string) bool {
	if s == "" || s[0] < 'A' || s[0] > 'Z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z') && !isDigit(c) && c != '_' {
			return false
		}
	}
	return true
}

func (p *parser) typeDef() *TypeDef {
	annot := p.annot
	p.annot = nil
	if p.tok.kind != tIdent || p.tok.text != "type" {
		p.failAt(p.tok.pos, "expected \"type\", found %s", p.describe())
	}
	p.next()
	if p.tok.kind != tIdent || !validTypeName(p.tok.text) {
		p.failAt(p.tok.pos, "expected a type name (an upper-case letter, then letters and digits), found %s", p.describe())
	}
	if _, prim := primitiveNames[p.tok.text]; prim {
		p.failAt(p.tok.pos, "type name %s is reserved", p.tok.text)
	}
	td := &TypeDef{Name: p.tok.text, Pos: p.tok.pos}
	if annot != nil {
		td.Tag = annot.tag
	}
	p.next()
	if p.tok.kind == tIdent && p.tok.text == "enum" {
		td.Type = p.enumType()
	} else {
		td.Type = p.typ()
	}
	return td
}

func (p *parser) enumType() *Type {
	t := &Type{Kind: KindEnum, Pos: p.tok.pos}
	p.next()
	p.expect("{")
	names := map[string]bool{}
	values := map[uint64]string{}
	var next uint64
	haveNext := true
	for !p.is("}") {
		if p.tok.kind != tIdent || !validEnumName(p.tok.text) {
			p.failAt(p.tok.pos, "expected an enum value name (upper case, digits, underscores), found %s", p.describe())
		}
		ev := EnumValue{Name: p.tok.text, Pos: p.tok.pos}
		p.next()
		if p.is("=") {
			p.next()
			ev.Value = p.integer("enum value", ^uint64(0))
		} else {
			if !haveNext {
				p.failAt(ev.Pos, "enum value %s overflows uint", ev.Name)
			}
			ev.Value = next
		}
		if names[ev.Name] {
			p.failAt(ev.Pos, "duplicate enum value name %s", ev.Name)
		}
		if other, dup := values[ev.Value]; dup {
			p.failAt(ev.Pos, "enum value %s = %d duplicates %s", ev.Name, ev.Value, other)
		}
		names[ev.Name] = true
		values[ev.Value] = ev.Name
		next, haveNext = ev.Value+1, ev.Value != ^uint64(0)
		t.Values = append(t.Values, ev)
	}
	p.next()
	if len(t.Values) == 0 {
		p.failAt(t.Pos, "an enum needs at least one value")
	}
	return t
}

func (p *parser) length() int {
	p.expect("[")
	n := p.integer("length", maxFixedLen)
	if n == 0 {
		p.failAt(p.tok.pos, "length must be at least 1")
	}
	p.expect("]")
	return int(n)
}

func (p *parser) typ() *Type {
	pos := p.tok.pos
	if p.tok.kind != tIdent {
		p.failAt(pos, "expected a type, found %s", p.describe())
	}
	name := p.tok.text
	p.next()
	if k, ok := primitiveNames[name]; ok {
		t := &Type{Kind: k, Pos: pos}
		if k == KindData && p.is("[") {
			t.Len = p.length()
		}
		return t
	}
	switch name {
	case "optional":
		p.expect("<")
		t := &Type{Kind: KindOptional, Pos: pos, Elem: p.typ()}
		p.expect(">")
		return t
	case "list":
		p.expect("<")
		t := &Type{Kind: KindList, Pos: pos, Elem: p.typ()}
		p.expect(">")
		if p.is("[") {
			t.Len = p.length()
		}
		return t
	case "map":
		p.expect("<")
		t := &Type{Kind: KindMap, Pos: pos, Key: p.typ()}
		p.expect(">")
		p.expect("<")
		t.Elem = p.typ()
		p.expect(">")
		return t
	case "struct":
		return p.structType(pos)
	case "union":
		return p.unionType(pos)
	case "enum":
		p.failAt(pos, "an enum must be declared as its own type: type Name enum { ... }")
	}
	if !validTypeName(name) {
		p.failAt(pos, "unknown type %s", name)
	}
	return &Type{Kind: KindNamed, Pos: pos, Name: name}
}

func (p *parser) structType(pos Pos) *Type {
	t := &Type{Kind: KindStruct, Pos: pos}
	p.expect("{")
	seen := map[string]bool{}
	for !p.is("}") {
		if p.tok.kind != tIdent || !validFieldName(p.tok.text) {
			p.failAt(p.tok.pos, "expected a field name (letters and digits), found %s", p.describe())
		}
		f := Field{Name: p.tok.text, Pos: p.tok.pos}
		if seen[f.Name] {
			p.failAt(f.Pos, "duplicate field %s", f.Name)
		}
		seen[f.Name] = true
		p.next()
		p.expect(":")
		f.Type = p.typ()
		t.Fields = append(t.Fields, f)
	}
	p.next()
	if len(t.Fields) == 0 {
		p.failAt(pos, "a struct needs at least one field")
	}
	return t
}

func (p *parser) unionType(pos Pos) *Type {
	t := &Type{Kind: KindUnion, Pos: pos}
	p.expect("{")
	if p.is("|") { // a leading bar is allowed
		p.next()
	}
	tags := map[uint64]bool{}
	var next uint64
	haveNext := true
	for {
		if p.is("}") {
			p.failAt(p.tok.pos, "expected a union member, found \"}\"")
		}
		mpos := p.tok.pos
		m := Member{Pos: mpos, Type: p.typ()}
		if p.is("=") {
			p.next()
			m.Tag = p.integer("union tag", ^uint64(0))
		} else {
			if !haveNext {
				p.failAt(m.Pos, "union tag overflows uint")
			}
			m.Tag = next
		}
		if tags[m.Tag] {
			p.failAt(m.Pos, "duplicate union tag %d", m.Tag)
		}
		tags[m.Tag] = true
		next, haveNext = m.Tag+1, m.Tag != ^uint64(0)
		t.Members = append(t.Members, m)
		if p.is("|") {
			p.next()
			continue
		}
		break
	}
	p.expect("}")
	return t
}
