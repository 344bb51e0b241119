package bare

import "strconv"

type place int

const (
	placeTop    place = iota // the whole type of a declaration
	placeMember              // a union member
	placeOther
)

// check resolves names and enforces the rules the grammar cannot express.
func (p *parser) check(s *Schema) {
	for _, td := range s.Types {
		p.checkType(s, td.Type, placeTop)
	}
	p.checkVoidInUnions(s)
	// Every declared type must have at least one finite value; otherwise
	// it recurses without an optional, list, map or union to stop it.
	finite := map[*TypeDef]bool{}
	for changed := true; changed; {
		changed = false
		for _, td := range s.Types {
			if !finite[td] && hasFinite(td.Type, finite) {
				finite[td] = true
				changed = true
			}
		}
	}
	for _, td := range s.Types {
		if !finite[td] {
			p.failAt(td.Pos, "type %s contains itself with no optional, list, map or union to end the recursion", td.Name)
		}
	}
}

// checkVoidInUnions refuses a void named type (type X void, or an alias
// of one) that no union has as a member: void may only be a union member,
// and a void type on its own would be a message of zero bytes that
// nothing can tell apart from another.
func (p *parser) checkVoidInUnions(s *Schema) {
	member := map[*TypeDef]bool{}
	for _, td := range s.Types {
		walkUnions(td.Type, func(m *Type) {
			if m.Kind == KindNamed && m.Def != nil {
				member[m.Def] = true
			}
		})
	}
	// A member that is an alias makes what it names a member too.
	for changed := true; changed; {
		changed = false
		for td := range member {
			if td.Type.Kind == KindNamed && td.Type.Def != nil && !member[td.Type.Def] {
				member[td.Type.Def] = true
				changed = true
			}
		}
	}
	for _, td := range s.Types {
		if Resolve(td.Type).Kind == KindVoid && !member[td] {
			p.failAt(td.Pos, "type %s is void but no union has it as a member: void may only be a union member", td.Name)
		}
	}
}

// walkUnions calls f for every member of every union within t (not
// through named types: each declaration is walked on its own).
func walkUnions(t *Type, f func(m *Type)) {
	switch t.Kind {
	case KindOptional, KindList:
		walkUnions(t.Elem, f)
	case KindMap:
		walkUnions(t.Key, f)
		walkUnions(t.Elem, f)
	case KindStruct:
		for _, fd := range t.Fields {
			walkUnions(fd.Type, f)
		}
	case KindUnion:
		for _, m := range t.Members {
			f(m.Type)
			walkUnions(m.Type, f)
		}
	}
}

func hasFinite(t *Type, finite map[*TypeDef]bool) bool {
	switch t.Kind {
	case KindNamed:
		return finite[t.Def]
	case KindOptional, KindMap:
		return true
	case KindList:
		return t.Len == 0 || hasFinite(t.Elem, finite)
	case KindStruct:
		for _, f := range t.Fields {
			if !hasFinite(f.Type, finite) {
				return false
			}
		}
		return true
	case KindUnion:
		for _, m := range t.Members {
			if hasFinite(m.Type, finite) {
				return true
			}
		}
		return false
	}
	return true
}

func (p *parser) checkType(s *Schema, t *Type, where place) {
	switch t.Kind {
	case KindVoid:
		if where == placeOther {
			p.failAt(t.Pos, "void may only be a union member or a named type")
		}
	case KindNamed:
		td, ok := s.byName[t.Name]
		if !ok {
			p.failAt(t.Pos, "undefined type %s", t.Name)
		}
		t.Def = td
		if where == placeOther && Resolve(t).Kind == KindVoid {
			p.failAt(t.Pos, "%s is void and may only be used as a union member", t.Name)
		}
	case KindOptional:
		p.checkType(s, t.Elem, placeOther)
	case KindList:
		p.checkType(s, t.Elem, placeOther)
	case KindMap:
		p.checkType(s, t.Key, placeOther)
		p.checkType(s, t.Elem, placeOther)
		if !validMapKey(t.Key) {
			p.failAt(t.Key.Pos, "map key must be a primitive type other than f32, f64, data or void, not %s", TypeString(t.Key))
		}
	case KindStruct:
		for _, f := range t.Fields {
			p.checkType(s, f.Type, placeOther)
		}
	case KindUnion:
		seen := map[string]Pos{}
		for _, m := range t.Members {
			p.checkType(s, m.Type, placeMember)
			name := TypeString(m.Type)
			if prev, dup := seen[name]; dup {
				p.failAt(m.Pos, "union member %s repeats the member at %s", name, prev)
			}
			seen[name] = m.Pos
		}
	}
}

// Resolve follows named types (even through chains of aliases) to the
// underlying type expression. Unresolved names are returned as is.
func Resolve(t *Type) *Type {
	for i := 0; t.Kind == KindNamed && t.Def != nil && i < 1000; i++ {
		t = t.Def.Type
	}
	return t
}

func validMapKey(t *Type) bool {
	r := Resolve(t)
	switch r.Kind {
	case KindUint, KindInt, KindU8, KindU16, KindU32, KindU64,
		KindI8, KindI16, KindI32, KindI64, KindBool, KindStr, KindEnum:
		return true
	}
	return false
}

// TypeString returns the schema text of t, with nested aggregates
// abbreviated ("struct {...}").
func TypeString(t *Type) string {
	switch t.Kind {
	case KindNamed:
		return t.Name
	case KindData:
		if t.Len > 0 {
			return "data[" + strconv.Itoa(t.Len) + "]"
		}
		return "data"
	case KindOptional:
		return "optional<" + TypeString(t.Elem) + ">"
	case KindList:
		s := "list<" + TypeString(t.Elem) + ">"
		if t.Len > 0 {
			s += "[" + strconv.Itoa(t.Len) + "]"
		}
		return s
	case KindMap:
		return "map<" + TypeString(t.Key) + "><" + TypeString(t.Elem) + ">"
	case KindStruct:
		return "struct {...}@" + t.Pos.String()
	case KindUnion:
		return "union {...}@" + t.Pos.String()
	case KindEnum:
		return "enum {...}"
	}
	return t.Kind.String()
}

// MinSize returns a lower bound of the encoded size of any value of t,
// saturating at 1<<32. Decoders use it to reject counts that the remaining
// input cannot possibly hold.
func MinSize(t *Type) int { return minSize(t, map[*TypeDef]bool{}) }

const minSizeCap = 1 << 32

func minSize(t *Type, visiting map[*TypeDef]bool) int {
	switch t.Kind {
	case KindU16, KindI16:
		return 2
	case KindU32, KindI32, KindF32:
		return 4
	case KindU64, KindI64, KindF64:
		return 8
	case KindVoid:
		return 0
	case KindData:
		if t.Len > 0 {
			return t.Len
		}
		return 1
	case KindList:
		if t.Len > 0 {
			return min(minSizeCap, t.Len*minSize(t.Elem, visiting))
		}
		return 1
	case KindStruct:
		n := 0
		for _, f := range t.Fields {
			n = min(minSizeCap, n+minSize(f.Type, visiting))
		}
		return n
	case KindNamed:
		if t.Def == nil || visiting[t.Def] {
			return 1 // a lower bound: every non-void value takes a byte
		}
		visiting[t.Def] = true
		n := minSize(t.Def.Type, visiting)
		delete(visiting, t.Def)
		return n
	}
	// uint, int, u8, i8, bool, str, enum, optional, map, union: one byte.
	return 1
}
