package bare_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/tempest-actors/tempest/wire/bare"
)

func TestParseDraftExample(t *testing.T) {
	s, err := bare.ParseSchemaFile("testdata/example.bare")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, td := range s.Types {
		names = append(names, td.Name)
	}
	if got, want := strings.Join(names, " "), "PublicKey Time Department Address Customer Employee TerminatedEmployee Person"; got != want {
		t.Fatalf("types = %s, want %s", got, want)
	}
	dep, _ := s.Lookup("Department")
	var vals []string
	for _, v := range dep.Type.Values {
		vals = append(vals, v.Name+"="+itoa(v.Value))
	}
	if got, want := strings.Join(vals, " "), "ACCOUNTING=0 ADMINISTRATION=1 CUSTOMER_SERVICE=2 DEVELOPMENT=3 JSMITH=99"; got != want {
		t.Fatalf("enum = %s, want %s", got, want)
	}
	pk, _ := s.Lookup("PublicKey")
	if pk.Type.Kind != bare.KindData || pk.Type.Len != 128 {
		t.Fatalf("PublicKey = %+v", pk.Type)
	}
	addr, _ := s.Lookup("Address")
	if addr.Type.Kind != bare.KindList || addr.Type.Len != 4 || addr.Type.Elem.Kind != bare.KindStr {
		t.Fatalf("Address = %+v", addr.Type)
	}
	cust, _ := s.Lookup("Customer")
	orders := cust.Type.Fields[3]
	if orders.Name != "orders" || orders.Type.Elem.Kind != bare.KindStruct || orders.Type.Elem.Fields[1].Type.Kind != bare.KindI32 {
		t.Fatalf("orders = %+v", orders)
	}
	if pos := cust.Type.Fields[4].Pos; pos.Line != 25 || pos.Col != 3 {
		t.Fatalf("metadata at %v, want line 25 col 3", pos)
	}
	person, _ := s.Lookup("Person")
	if n := len(person.Type.Members); n != 3 || person.Type.Members[2].Tag != 2 {
		t.Fatalf("Person = %+v", person.Type)
	}
	if got := bare.MinSize(&bare.Type{Kind: bare.KindNamed, Name: "Employee", Def: mustLookup(s, "Employee")}); got != 1+1+4+1+1+1+1 {
		t.Fatalf("MinSize(Employee) = %d", got)
	}
}

func mustLookup(s *bare.Schema, n string) *bare.TypeDef { td, _ := s.Lookup(n); return td }

func itoa(v uint64) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for v > 0 {
		b = append([]byte{byte('0' + v%10)}, b...)
		v /= 10
	}
	return string(b)
}

func TestParseFeatures(t *testing.T) {
	src := `
type A union { | str | u8 = 5 | B | void }   # leading bar, explicit tag, counting on
type B struct { x: optional<list<map<u64><list<data[2]>[3]>>> }
type Node struct { value: int next: optional<Node> }
type Tree struct { kids: list<Tree> }
type E enum { X = 18446744073709551615 }
type M map<E><uint>
type Get void
type Op union { Get | Set = 3 }
type Set struct { v: i64 }
`
	s, err := bare.ParseSchema("f.bare", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := s.Lookup("A")
	var tags []string
	for _, m := range a.Type.Members {
		tags = append(tags, itoa(m.Tag))
	}
	if got := strings.Join(tags, ","); got != "0,5,6,7" {
		t.Fatalf("tags = %s", got)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ src, want string }{
		{"type A struct {}", "f.bare:1:8: a struct needs at least one field"},
		{"type A union {}", "f.bare:1:15: expected a union member"},
		{"type A enum {}", "f.bare:1:8: an enum needs at least one value"},
		{"type A struct { a: B }", "f.bare:1:20: undefined type B"},
		{"type A u8\ntype A u16", "f.bare:2:6: type A redeclared"},
		{"type A struct { a: u8 a: u8 }", "f.bare:1:23: duplicate field a"},
		{"type A enum { X Y = 0 }", "f.bare:1:17: enum value Y = 0 duplicates X"},
		{"type A enum { X x }", "f.bare:1:17: expected an enum value name"},
		{"type A union { u8 = 1 | str = 1 }", "f.bare:1:25: duplicate union tag 1"},
		{"type A union { u8 | u8 }", "f.bare:1:21: union member u8 repeats"},
		{"type A map<f32><u8>", "f.bare:1:12: map key must be a primitive type other than f32"},
		{"type A map<data><u8>", "f.bare:1:12: map key must be"},
		{"type A map<data[4]><u8>", "f.bare:1:12: map key must be"},
		{"type K f64\ntype A map<K><u8>", "f.bare:2:12: map key must be"},
		{"type A struct { v: void }", "f.bare:1:20: void may only be"},
		{"type A optional<void>", "f.bare:1:17: void may only be"},
		{"type G void\ntype A list<G>", "f.bare:2:13: G is void"},
		{"type G void", "f.bare:1:6: type G is void but no union has it as a member"},
		{"type G void\ntype H G\ntype U union { u8 }", "f.bare:1:6: type G is void but no union"},
		{"type A void\ntype B union { u8 | str }", "f.bare:1:6: type A is void but no union"},
		{"type A data[0]", "f.bare:1:14: length must be at least 1"},
		{"type A list<u8>[99999999999]", "f.bare:1:17: invalid length"},
		{"type A struct { a: A }", "f.bare:1:6: type A contains itself"},
		{"type A B\ntype B A", "f.bare:1:6: type A contains itself"},
		{"type A list<A>[2]", "f.bare:1:6: type A contains itself"},
		{"type a u8", "f.bare:1:6: expected a type name"},
		{"type A u8 $", "f.bare:1:11: unexpected character '$'"},
		{"type A list<u8", "f.bare:1:15: expected \">\", found end of file"},
		{"type A struct { a: enum { X } }", "f.bare:1:20: an enum must be declared as its own type"},
		{"type A foo", "f.bare:1:8: unknown type foo"},
		{"type A u8 = 3", "f.bare:1:11: expected \"type\""},
		{"type u8 u8", "f.bare:1:6: expected a type name"},
		{"# @tag 0\ntype A u8", "f.bare:1:1: message tag \"0\": want a decimal number in [1, 4294967040]"},
		{"# @tag 4294967041\ntype A u8", "f.bare:1:1: message tag \"4294967041\""},
		{"# @tag 012\ntype A u8", "f.bare:1:1: message tag \"012\""},
		{"# @tag x\ntype A u8", "f.bare:1:1: message tag \"x\""},
		{"# @tag\ntype A u8", "f.bare:1:1: want \"# @tag N\""},
		{"# @tag 1\n# @tag 2\ntype A u8", "f.bare:2:1: a second @tag annotation for one type (first at f.bare:1:1)"},
		{"# @tag 7\ntype A u8\n# @tag 7\ntype B u8", "f.bare:4:6: message tag 7 of B is already A's (f.bare:2:6)"},
		{"type A struct {\n# @tag 3\n a: u8 }", "f.bare:2:1: a @tag annotation must come right before a type declaration"},
		{"type A u8\n# @tag 3\n", "f.bare:2:1: a @tag annotation must come right before"},
		{"type A u8\n# @tag 3\ntype U union { A }", "f.bare:3:6: union U cannot carry a @tag annotation"},
		{"type A u8\ntype U union { A }\n# @tag 3\ntype V U", "f.bare:4:6: union V cannot carry a @tag annotation"},
	}
	for _, c := range cases {
		_, err := bare.ParseSchema("f.bare", []byte(c.src))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want prefix %q", c.src, err, c.want)
			continue
		}
		if !errors.Is(err, bare.ErrSchema) {
			t.Errorf("%q: not ErrSchema", c.src)
		}
	}
}

func TestParseSchemaFileMissing(t *testing.T) {
	if _, err := bare.ParseSchemaFile(t.TempDir() + "/none.bare"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v", err)
	}
}

// TestTagAnnotations: "# @tag N" declares the next type's message tag;
// other comments, and @tag inside a longer comment word, change nothing.
func TestTagAnnotations(t *testing.T) {
	s, err := bare.ParseSchema("f.bare", []byte(`# A message.
# @tag 1001
type A struct { a: u8 }
#@tag    1002
type B u8
# @tagged is not a directive
type C u8
`))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint32{"A": 1001, "B": 1002, "C": 0} {
		if td, _ := s.Lookup(name); td.Tag != want {
			t.Errorf("%s: tag %d, want %d", name, td.Tag, want)
		}
	}
}
