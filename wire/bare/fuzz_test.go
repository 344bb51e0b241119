package bare_test

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/tempest-actors/tempest/wire/bare"
	"github.com/tempest-actors/tempest/wire/bare/gen"
)

func FuzzParseSchema(f *testing.F) {
	example, err := os.ReadFile("testdata/example.bare")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(example))
	f.Add(allSchema)
	f.Add("type A union { | str | u8 = 5 | B } type B struct { x: optional<B> }")
	f.Add("type A struct { a: A }")
	f.Add("type A enum { X = 18446744073709551615 Y }")
	f.Add("type A list<map<str><data[3]>>[2] # c")
	f.Fuzz(func(t *testing.T, src string) {
		s, err := bare.ParseSchema("f.bare", []byte(src))
		if err != nil {
			if !errors.Is(err, bare.ErrSchema) {
				t.Fatalf("error %v is not ErrSchema", err)
			}
			return
		}
		for _, td := range s.Types {
			bare.MinSize(td.Type)
			bare.TypeString(td.Type)
		}
		if _, err := gen.Generate(s, gen.Options{Package: "p"}); err != nil && !errors.Is(err, gen.ErrUnsupported) {
			t.Fatalf("generate: %v\nschema:\n%s", err, src)
		}
	})
}

const fuzzSchema = allSchema + `
type Tree struct { label: str kids: list<Tree> next: optional<Tree> }
type Big map<str><list<Tree>>
`

var fuzzTypes = []string{"T", "U", "Tree", "Big", "E"}

// BARE → JSON → BARE is the identity for every accepted message.
func FuzzTranscodeBARE(f *testing.F) {
	s, err := bare.ParseSchema("f.bare", []byte(fuzzSchema))
	if err != nil {
		f.Fatal(err)
	}
	tc := bare.NewTranscoder(s, bare.Config{})
	f.Add(byte(2), []byte{0x01, 'a', 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00})
	f.Add(byte(1), []byte{0x09, 0x05})
	f.Add(byte(3), []byte{0x01, 0x01, 'k', 0x01, 0x00, 0x00, 0x00})
	f.Add(byte(4), []byte{0x07})
	f.Add(byte(2), []byte{0x00, 0x80, 0x00, 0x00})
	f.Fuzz(func(t *testing.T, which byte, msg []byte) {
		typ := fuzzTypes[int(which)%len(fuzzTypes)]
		js, err := tc.BAREToJSON(typ, msg)
		if err != nil {
			var de *bare.DecodeError
			if !errors.As(err, &de) || de.Offset < 0 || de.Offset > len(msg) {
				t.Fatalf("error %v is not a DecodeError within the input", err)
			}
			return
		}
		back, err := tc.JSONToBARE(typ, js)
		if err != nil {
			t.Fatalf("JSON %s of %x does not encode: %v", js, msg, err)
		}
		if !bytes.Equal(back, msg) {
			t.Fatalf("round trip of %x via %s gave %x", msg, js, back)
		}
	})
}

// JSON → BARE → JSON → BARE reaches a fixed point at once.
func FuzzTranscodeJSON(f *testing.F) {
	s, err := bare.ParseSchema("f.bare", []byte(fuzzSchema))
	if err != nil {
		f.Fatal(err)
	}
	tc := bare.NewTranscoder(s, bare.Config{})
	f.Add(byte(2), `{"label":"x","kids":[{"label":"y","kids":[],"next":null}],"next":null}`)
	f.Add(byte(1), `{"Get":null}`)
	f.Add(byte(1), `{"8":{"z":true}}`)
	f.Add(byte(3), `{"a":[],"b":[{"label":"","kids":[],"next":null}]}`)
	f.Add(byte(0), `{"u":1,"i":-1,"a8":1,"a16":1,"a32":1,"a64":"18446744073709551615","b8":1,"b16":1,"b32":1,"b64":1,"f32":0.1,"f64":1e300,"b":false,"s":"\u0000","d":"","d2":"AAA=","e":"A","o":3,"l":[],"l2":[0,0],"ms":{},"mi":{"7":false},"mb":{"true":0},"me":{},"un":[]}`)
	f.Fuzz(func(t *testing.T, which byte, js string) {
		typ := fuzzTypes[int(which)%len(fuzzTypes)]
		b1, err := tc.JSONToBARE(typ, []byte(js))
		if err != nil {
			return
		}
		j2, err := tc.BAREToJSON(typ, b1)
		if err != nil {
			t.Fatalf("BARE %x from %s does not decode: %v", b1, js, err)
		}
		b2, err := tc.JSONToBARE(typ, j2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("%s -> %x -> %s -> %x, %v", js, b1, j2, b2, err)
		}
	})
}

// The primitive reads never panic and never move past the input.
func FuzzDecodePrimitives(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3}, []byte{0x80, 0x01, 0x02, 0x61})
	f.Add([]byte{5, 6, 7}, []byte{0x03, 'a', 'b', 'c', 0xff})
	f.Fuzz(func(t *testing.T, ops, msg []byte) {
		d := bare.NewDecoder(msg, bare.Config{MaxMessageBytes: 1 << 10, MaxDepth: 4})
		for _, op := range ops {
			switch op % 12 {
			case 0:
				if v := d.Uint(); d.Err() == nil && !bytes.HasSuffix(msg[:d.Offset()], bare.AppendUint(nil, v)) {
					t.Fatalf("uint %d accepted in a non-canonical form", v)
				}
			case 1:
				d.Int()
			case 2:
				d.U64()
			case 3:
				d.Bool()
			case 4:
				d.Optional()
			case 5:
				d.Str()
			case 6:
				d.Data(nil)
			case 7:
				d.Count(3)
			case 8:
				d.FixedData(make([]byte, op%5))
			case 9:
				d.Enter()
			case 10:
				d.F32()
			case 11:
				d.Bytes(int(op % 7))
			}
			if d.Offset() > len(msg) {
				t.Fatalf("offset %d beyond %d", d.Offset(), len(msg))
			}
		}
		d.Finish()
	})
}
