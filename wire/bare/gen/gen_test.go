package gen_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tempest-actors/tempest/wire/bare"
	"github.com/tempest-actors/tempest/wire/bare/gen"
)

func generate(t *testing.T, src string) ([]byte, error) {
	t.Helper()
	s, err := bare.ParseSchema("t.bare", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return gen.Generate(s, gen.Options{Package: "p"})
}

func TestUnsupported(t *testing.T) {
	for _, src := range []string{
		"type O optional<u8>",
		"type U union { V | str }\ntype V union { u8 }",
		"type U union { optional<u8> }",
		"type S struct { a: u8 A: u8 }",
	} {
		if _, err := generate(t, src); !errors.Is(err, gen.ErrUnsupported) {
			t.Errorf("%q: err = %v", src, err)
		}
	}
}

func TestBadPackage(t *testing.T) {
	s, _ := bare.ParseSchema("t.bare", []byte("type A u8"))
	if _, err := gen.Generate(s, gen.Options{Package: "1x"}); err == nil {
		t.Fatal("accepted package 1x")
	}
}

func TestNamesAndImports(t *testing.T) {
	out, err := generate(t, "type E enum { A_B C }\ntype S struct { f: struct { g: u8 } }\ntype A u8")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"EAB E = 0", "EC  E = 1", "type SF struct", `"strconv"`, "type A uint8"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), `"slices"`) {
		t.Error("imports slices without maps")
	}
}

func TestCheckFile(t *testing.T) {
	dir := t.TempDir()
	schema := filepath.Join(dir, "x.bare")
	out := filepath.Join(dir, "x_bare.go")
	if err := os.WriteFile(schema, []byte("type X struct { a: u8 }"), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := gen.GenerateFile(schema, "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := gen.CheckFile(schema, out, "x"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(schema, []byte("type X struct { a: u16 }"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := gen.CheckFile(schema, out, "x"); !errors.Is(err, gen.ErrStale) {
		t.Fatalf("err = %v, want ErrStale", err)
	}
}

// TestUnionTagConstants: every union member gets a tag constant, and the
// generated encoder and decoder use it rather than a number.
func TestUnionTagConstants(t *testing.T) {
	out, err := generate(t, "type A struct { x: u8 }\ntype U union { A | str = 7 | void }")
	if err != nil {
		t.Fatal(err)
	}
	src := strings.Join(strings.Fields(string(out)), " ")
	for _, want := range []string{"UTagA uint64 = 0", "UTagUStr uint64 = 7", "UTagUVoid uint64 = 8",
		"bare.AppendUint(dst, UTagA)", "case UTagUStr:"} {
		if !strings.Contains(src, want) {
			t.Errorf("output lacks %q:\n%s", want, src)
		}
	}
}

func TestTagAnnotation(t *testing.T) {
	out, err := generate(t, "# @tag 1001\ntype S struct { a: u8 }\n# @tag 1002\ntype G void\ntype U union { G }")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"const SMessageTag uint32 = 1001", "func (S) MessageTag() uint32 { return SMessageTag }",
		`func (S) BAREName() string { return "S" }`, "const GMessageTag uint32 = 1002"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// ParseSchema refuses a tagged union (TestParseErrors); Generate
	// also refuses one in a schema changed after parsing.
	s, err := bare.ParseSchema("t.bare", []byte("type U union { u8 }"))
	if err != nil {
		t.Fatal(err)
	}
	s.Types[0].Tag = 5
	if _, err := gen.Generate(s, gen.Options{Package: "p"}); !errors.Is(err, gen.ErrUnsupported) {
		t.Errorf("a tagged union: err = %v, want ErrUnsupported", err)
	}
}
