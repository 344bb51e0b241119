package bare

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// toAny converts a parsed tree to what encoding/json produces with
// UseNumber (duplicate keys: the last wins).
func toAny(n *jnode) any {
	switch n.kind {
	case jNull:
		return nil
	case jBool:
		return n.b
	case jNum:
		return json.Number(n.s)
	case jStr:
		return n.s
	case jArr:
		out := make([]any, len(n.arr))
		for i, c := range n.arr {
			out[i] = toAny(c)
		}
		return out
	}
	out := make(map[string]any, len(n.keys))
	for i, k := range n.keys {
		out[k] = toAny(n.vals[i])
	}
	return out
}

func refParse(data []byte) (any, bool) {
	if !json.Valid(data) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	return v, true
}

func TestParseJSONCases(t *testing.T) {
	for _, s := range []string{
		`null`, ` true `, `false`, `0`, `-0.5e+10`, `1E2`, `"a\"b\\c\/\b\f\n\r\t\u00e9\ud83d\ude00"`,
		`[]`, `{}`, `[1,[2,{"a":[]}]]`, `{"a":1,"a":2}`,
		`"héllo"`,
	} {
		n, err := parseJSON([]byte(s), 100)
		if err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		ref, ok := refParse([]byte(s))
		if !ok || !reflect.DeepEqual(toAny(n), ref) {
			t.Errorf("%s: got %#v, encoding/json %#v", s, toAny(n), ref)
		}
	}
	for _, s := range []string{
		``, ` `, `nul`, `01`, `-`, `1.`, `.5`, `1e`, `+1`, `[1,]`, `{"a"}`, `{"a":1,}`, `{1:2}`,
		`"abc`, "\"a\x01\"", `"\x"`, `"\u12"`, `[1] 2`, `tru`, "\"\xff\"", `[`, `{"a":`,
		// Unpaired surrogates, which encoding/json turns into U+FFFD.
		`"\ud800"`, `"\ud800\u0041"`, `"\udc00\udc00"`, `"\ud83d"`, `"a\ude00b"`, `"\ud83d\ud83d\ude00"`,
	} {
		if _, err := parseJSON([]byte(s), 100); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
	if _, err := parseJSON([]byte("[[[[1]]]]"), 3); err == nil {
		t.Error("depth limit ignored")
	}
}

// The parser agrees with encoding/json on every valid UTF-8 input, but
// for strings with an unpaired surrogate escape, which it refuses.
func FuzzTranscodeJSONParser(f *testing.F) {
	for _, s := range []string{`{"a":[1,"x",null,true]}`, `"\ud83d\ude00"`, `-1.5e3`, `[{}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := parseJSON(data, 10000)
		if !utf8.Valid(data) {
			return
		}
		if err != nil && strings.Contains(err.Error(), errUnpairedSurrogate) {
			return
		}
		ref, ok := refParse(data)
		if (err == nil) != ok {
			t.Fatalf("%q: parse error %v, encoding/json valid %v", data, err, ok)
		}
		if ok && !reflect.DeepEqual(toAny(n), ref) {
			t.Fatalf("%q: got %#v, encoding/json %#v", data, toAny(n), ref)
		}
	})
}
