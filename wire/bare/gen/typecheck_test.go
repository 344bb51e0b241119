package gen_test

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"testing"
)

// Generated code type-checks for schemas that exercise naming, nesting,
// recursion and every member kind.
func TestGeneratedCodeTypeChecks(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks against the source of wire/bare")
	}
	schemas := []string{
		`type U union { struct { u: optional<U> } | str | data[3] | list<U> | map<str><U> }`,
		`type L list<L> type M map<u8><M> type S struct { l: L m: M }`,
		`type E enum { A_B AB A__B } type F E type G F type S struct { m: map<G><list<F>> }`,
		`type K str type V void type U union { V | K | u8 = 9 | void } type W U type S struct { w: W o: optional<W> }`,
		`type T struct { a: list<list<list<struct { b: map<bool><data[1]> }>[2]>> c: struct { d: struct { e: u8 } } }`,
		`type A data[16] type B A type C list<B>[2] type D struct { c: C b: optional<B> }`,
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "source", nil)
	for _, src := range schemas {
		out, err := generate(t, src)
		if err != nil {
			t.Errorf("%s: %v", src, err)
			continue
		}
		f, err := parser.ParseFile(fset, "gen.go", out, 0)
		if err != nil {
			t.Errorf("%s: %v", src, err)
			continue
		}
		conf := types.Config{Importer: imp}
		if _, err := conf.Check("p", fset, []*ast.File{f}, nil); err != nil {
			t.Errorf("%s: %v\n%s", src, err, out)
		}
	}
}
