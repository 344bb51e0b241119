package bare_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/tempest-actors/tempest/wire/bare"
)

const allSchema = `
type E enum { A B = 7 C }
type Key str
type Get void
type U union { str | u8 = 5 | Get | void | struct { z: bool } | S }
type S struct { n: u8 }
type T struct {
  u: uint  i: int  a8: u8  a16: u16  a32: u32  a64: u64
  b8: i8  b16: i16  b32: i32  b64: i64  f32: f32  f64: f64
  b: bool  s: str  d: data  d2: data[2]  e: E  o: optional<u8>
  l: list<i8>  l2: list<u8>[2]  ms: map<Key><u8>  mi: map<i16><bool>  mb: map<bool><u8>  me: map<E><u8>
  un: list<U>
}
`

func transcoder(t *testing.T, src string) *bare.Transcoder {
	t.Helper()
	s, err := bare.ParseSchema("t.bare", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return bare.NewTranscoder(s, bare.Config{})
}

func TestTranscodeEveryType(t *testing.T) {
	tc := transcoder(t, allSchema)
	js := `{"u":"18446744073709551615","i":-9007199254740993,"a8":255,"a16":65535,"a32":4294967295,"a64":9007199254740992,` +
		`"b8":-128,"b16":-32768,"b32":-2147483648,"b64":"-9223372036854775808","f32":1.5,"f64":-0.1,` +
		`"b":true,"s":"h\u00e9\"\n","d":"AQID","d2":"//8=","e":"C","o":null,` +
		`"l":[-1,2],"l2":[1,2],"ms":{"z":1,"a":2},"mi":{"-3":true},"mb":{"false":1},"me":{"B":9},` +
		`"un":[{"str":"x"},{"u8":3},{"Get":null},{"void":null},{"8":{"z":false}},{"S":{"n":1}}]}`
	b, err := tc.JSONToBARE("T", []byte(js))
	if err != nil {
		t.Fatal(err)
	}
	wantHex := "" +
		"ffffffffffffffffff01" + // u
		"8180808080808020" + // i = -(2^53+1) zig-zag = 2^54+1
		"ff" + "ffff" + "ffffffff" + "0000000000002000" + // a8..a64
		"80" + "0080" + "00000080" + "0000000000000080" + // b8..b64
		"0000c03f" + "9a9999999999b9bf" + // f32, f64
		"01" + "0568c3a9220a" + "03010203" + "ffff" + // b, s, d, d2
		"08" + "00" + // e = C = 8, o = none
		"02" + "ff" + "02" + "0102" + // l, l2
		"02" + "017a01" + "016102" + // ms in input order
		"01" + "fdff" + "01" + // mi
		"01" + "00" + "01" + // mb
		"01" + "07" + "09" + // me
		"06" + "00" + "0178" + "05" + "03" + "06" + "07" + "08" + "00" + "09" + "01" // un
	if got := hex.EncodeToString(b); got != wantHex {
		t.Fatalf("BARE\n%s\nwant\n%s", got, wantHex)
	}
	back, err := tc.BAREToJSON("T", b)
	if err != nil {
		t.Fatal(err)
	}
	wantJS := strings.Replace(js, `"h\u00e9\"\n"`, `"hé\"\n"`, 1)
	// 64-bit integers given as strings come back as numbers: the JSON
	// type of a value never depends on its size.
	wantJS = strings.Replace(wantJS, `"u":"18446744073709551615"`, `"u":18446744073709551615`, 1)
	wantJS = strings.Replace(wantJS, `"b64":"-9223372036854775808"`, `"b64":-9223372036854775808`, 1)
	if string(back) != wantJS {
		t.Fatalf("JSON\n%s\nwant\n%s", back, wantJS)
	}
}

func TestTranscodeDraftExample(t *testing.T) {
	s, err := bare.ParseSchemaFile("testdata/example.bare")
	if err != nil {
		t.Fatal(err)
	}
	tc := bare.NewTranscoder(s, bare.Config{})
	js := `{"Customer":{"name":"Ann","email":"a@b","address":["1","2","3","4"],"orders":[{"orderId":5,"quantity":-1}],"metadata":{"k":"/w=="}}}`
	b, err := tc.JSONToBARE("Person", []byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := hex.EncodeToString(b), "0003416e6e0361406201310132013301340105000000000000"+"00ffffffff01016b01ff"; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	back, err := tc.BAREToJSON("Person", b)
	if err != nil || string(back) != js {
		t.Fatalf("back = %s, %v", back, err)
	}
	if b, err := tc.JSONToBARE("Person", []byte(`{"TerminatedEmployee":null}`)); err != nil || hex.EncodeToString(b) != "02" {
		t.Fatalf("terminated = %x, %v", b, err)
	}
}

// TestTranscodeJSONMissingOptional: a missing optional field is absent,
// as null is; the output names it (null).
func TestTranscodeJSONMissingOptional(t *testing.T) {
	tc := transcoder(t, `type S struct { a: u8 b: optional<str> c: O } type O optional<u8>`)
	b, err := tc.JSONToBARE("S", []byte(`{"a":1}`))
	if err != nil || hex.EncodeToString(b) != "010000" {
		t.Fatalf("missing optionals = %x, %v; want 010000", b, err)
	}
	if b2, err := tc.JSONToBARE("S", []byte(`{"a":1,"b":null,"c":null}`)); err != nil || !bytes.Equal(b, b2) {
		t.Fatalf("null optionals = %x, %v; want %x", b2, err, b)
	}
	out, err := tc.BAREToJSON("S", b)
	if err != nil || string(out) != `{"a":1,"b":null,"c":null}` {
		t.Fatalf("back to JSON: %s, %v", out, err)
	}
	if _, err := tc.JSONToBARE("S", []byte(`{"b":"x"}`)); err == nil || !strings.Contains(err.Error(), "$.a: missing field") {
		t.Fatalf("a missing required field: %v", err)
	}
}

// A string escape that names half a UTF-16 pair is refused, naming the
// escape, rather than stored as U+FFFD (what encoding/json would make of
// it): the stored string would not be the one sent.
func TestTranscodeJSONUnpairedSurrogate(t *testing.T) {
	tc := transcoder(t, `type T struct { s: str }`)
	for _, js := range []string{`{"s":"a\ud800"}`, `{"s":"\udc00b"}`, `{"s":"\ud83d\u0041"}`} {
		_, err := tc.JSONToBARE("T", []byte(js))
		if !errors.Is(err, bare.ErrJSON) || !strings.Contains(err.Error(), "unpaired UTF-16 surrogate") {
			t.Errorf("%s: err = %v, want an unpaired surrogate refused", js, err)
		}
	}
	b, err := tc.JSONToBARE("T", []byte(`{"s":"\ud83d\ude00"}`))
	if err != nil {
		t.Fatal(err)
	}
	if js, err := tc.BAREToJSON("T", b); err != nil || !strings.Contains(string(js), "\U0001F600") && !strings.Contains(string(js), "😀") {
		t.Fatalf("a pair: %s, %v", js, err)
	}
}

func TestTranscodeJSONErrors(t *testing.T) {
	tc := transcoder(t, `type S struct { a: u8 b: optional<list<E>> } type E enum { X } type U union { S } type M map<u8><u8>`)
	cases := []struct{ typ, js, want string }{
		{"S", `{"b":null}`, "$.a: missing field"},
		{"S", `{"a":1,"b":null,"c":2}`, "$.c: unknown field"},
		{"S", `{"a":1,"a":2,"b":null}`, "$.a: duplicate field"},
		{"S", `{"a":256,"b":null}`, `$.a: "256" is not a u8`},
		{"S", `{"a":"1","b":null}`, "$.a: want an integer, got string"},
		{"S", `{"a":1.5,"b":null}`, `$.a: "1.5" is not a u8`},
		{"S", `{"a":1,"b":["Y"]}`, `$.b[0]: unknown enum value "Y"`},
		{"S", `[1]`, "$: want an object, got array"},
		{"U", `{"S":{"a":1,"b":null},"T":1}`, "$: want an object with exactly one member name"},
		{"U", `{"T":1}`, `$: unknown union member "T"`},
		{"M", `{"1":1,"01":2}`, `$["01"]: duplicate map key`},
		{"M", `{"x":1}`, `$["x"]: "x" is not a u8`},
		{"S", `{"a":1,"b":null} x`, "invalid JSON"},
		{"S", `{"a":1`, "invalid JSON"},
	}
	for _, c := range cases {
		_, err := tc.JSONToBARE(c.typ, []byte(c.js))
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, bare.ErrJSON) {
			t.Errorf("%s %s: err = %v, want %q", c.typ, c.js, err, c.want)
		}
	}
	if _, err := tc.JSONToBARE("Nope", []byte(`1`)); !errors.Is(err, bare.ErrUnknownType) {
		t.Errorf("unknown type: %v", err)
	}
	small := bare.NewTranscoder(mustParse(t, "type D data"), bare.Config{MaxMessageBytes: 4})
	if _, err := small.JSONToBARE("D", []byte(`"AAAAAAAA"`)); !errors.Is(err, bare.ErrLimit) {
		t.Errorf("encoded size limit: %v", err)
	}
	if _, err := small.JSONToBARE("D", []byte(`"`+strings.Repeat(" ", 40)+`"`)); !errors.Is(err, bare.ErrLimit) {
		t.Errorf("input size limit: %v", err)
	}
	deep := strings.Repeat("[", 100) + strings.Repeat("]", 100)
	if _, err := tc.JSONToBARE("S", []byte(deep)); err == nil || !strings.Contains(err.Error(), "nesting") {
		t.Errorf("deep JSON: %v", err)
	}
}

// TestTranscodeJSONErrorsQuoteLittleOfTheInput: an error names the
// offending number, name or key by its first 64 bytes and its length, so
// that the error about a value of 900 KB is not 900 KB long.
func TestTranscodeJSONErrorsQuoteLittleOfTheInput(t *testing.T) {
	tc := transcoder(t, `type S struct { a: u8 i: i64 f: f64 e: E } type E enum { X } type U union { S } type M map<str><u8> type B map<bool><u8>`)
	const n = 900000
	digits, name := strings.Repeat("9", n), strings.Repeat("x", n)
	clipped := func(s string) string { return s[:64] + "... (900000 bytes)" }
	quoted := func(s string) string { return `"` + s[:64] + `"... (900000 bytes)` }
	for _, c := range []struct{ typ, js, want string }{
		{"S", `{"a":` + digits + `,"i":0,"f":0,"e":"X"}`, `$.a: ` + quoted(digits) + ` is not a u8`},
		{"S", `{"a":0,"i":` + digits + `,"f":0,"e":"X"}`, `$.i: ` + quoted(digits) + ` is not an i64`},
		{"S", `{"a":0,"i":"-` + digits + `","f":0,"e":"X"}`, `$.i: "-` + digits[:63] + `"... (900001 bytes) is not an i64`},
		{"S", `{"a":0,"i":0,"f":` + digits + `,"e":"X"}`, `$.f: ` + clipped(digits) + ` is not an f64`},
		{"S", `{"a":0,"i":0,"f":0,"e":"` + name + `"}`, `$.e: unknown enum value ` + quoted(name)},
		{"S", `{"a":0,"i":0,"f":0,"e":"X","` + name + `":1}`, `$.` + clipped(name) + `: unknown field`},
		{"S", `{"` + name + `":1,"` + name + `":2}`, `$.` + clipped(name) + `: duplicate field`},
		{"U", `{"` + name + `":1}`, `$: unknown union member ` + quoted(name)},
		{"M", `{"` + name + `":"x"}`, `$[` + quoted(name) + `]: want an integer, got string`},
		{"B", `{"` + name + `":1}`, `$[` + quoted(name) + `]: map key ` + quoted(name) + ` is not true or false`},
	} {
		_, err := tc.JSONToBARE(c.typ, []byte(c.js))
		if err == nil || !errors.Is(err, bare.ErrJSON) {
			t.Fatalf("%s %.80s: err = %v, want a JSON error", c.typ, c.js, err)
		}
		if got := err.Error(); got != c.want {
			t.Errorf("%s %.80s:\n got %.300q (%d bytes)\nwant %q", c.typ, c.js, got, len(got), c.want)
		}
	}
	// A cut does not split a UTF-8 sequence: the quote stays valid UTF-8.
	wide := strings.Repeat("é", 100) // 2 bytes each: byte 64 starts one
	_, err := tc.JSONToBARE("U", []byte(`{"a`+wide+`":1}`))
	if want := `$: unknown union member "a` + strings.Repeat("é", 31) + `"... (201 bytes)`; err == nil || err.Error() != want {
		t.Errorf("a name of 2-byte runes: %v, want %s", err, want)
	}
}

func TestTranscodeBAREErrors(t *testing.T) {
	tc := transcoder(t, `type S struct { a: u8 e: E } type E enum { X } type M map<u8><u8> type F f64 type U union { u8 = 1 }`)
	cases := []struct {
		typ, hex string
		reason   error
		offset   int
	}{
		{"S", "0101", bare.ErrUnknownEnum, 1},
		{"S", "010000", bare.ErrTrailingBytes, 2},
		{"M", "0201010101", bare.ErrDuplicateMapKey, 3},
		{"F", "000000000000f87f", bare.ErrInvalidValue, 0},
		{"U", "00", bare.ErrUnknownUnionTag, 0},
		{"M", "05", bare.ErrShortInput, 0},
	}
	for _, c := range cases {
		_, err := tc.BAREToJSON(c.typ, unhex(t, c.hex))
		var de *bare.DecodeError
		if !errors.Is(err, c.reason) || !errors.As(err, &de) || de.Offset != c.offset {
			t.Errorf("%s %s: err = %v, want %v at %d", c.typ, c.hex, err, c.reason, c.offset)
		}
	}
}

func mustParse(t *testing.T, src string) *bare.Schema {
	t.Helper()
	s, err := bare.ParseSchema("t.bare", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTranscodeLargeIntegersStayNumbers: a reply's JSON type does not
// switch to a string when a 64-bit value grows past 2^53.
func TestTranscodeLargeIntegersStayNumbers(t *testing.T) {
	tc := transcoder(t, `type S struct { u: u64 i: i64 v: uint w: int }`)
	for _, js := range []string{
		`{"u":0,"i":0,"v":0,"w":0}`,
		`{"u":9007199254740992,"i":-9007199254740992,"v":9007199254740992,"w":9007199254740992}`,
		`{"u":9007199254740993,"i":-9007199254740993,"v":9007199254740993,"w":-9007199254740993}`,
		`{"u":18446744073709551615,"i":-9223372036854775808,"v":18446744073709551615,"w":9223372036854775807}`,
	} {
		b, err := tc.JSONToBARE("S", []byte(js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		back, err := tc.BAREToJSON("S", b)
		if err != nil || string(back) != js {
			t.Errorf("round trip of %s = %s, %v", js, back, err)
		}
	}
}
