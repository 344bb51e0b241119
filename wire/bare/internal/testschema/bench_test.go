package testschema_test

import (
	"bytes"
	"encoding/gob"
	"encoding/json"
	"testing"

	"github.com/tempest-actors/tempest/wire/bare"
	ts "github.com/tempest-actors/tempest/wire/bare/internal/testschema"
)

// BenchmarkEnvelope compares the generated BARE code with encoding/json and
// encoding/gob (the baselines, in the same run) on an envelope-like
// message: ids, a string, a 100-byte payload, an optional and a small list.
func BenchmarkEnvelope(b *testing.B) {
	e := envelope()
	b.Run("encode/bare", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 256)
		for b.Loop() {
			out, err := e.AppendBARE(buf[:0])
			if err != nil {
				b.Fatal(err)
			}
			buf = out
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("encode/json", func(b *testing.B) {
		b.ReportAllocs()
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for b.Loop() {
			buf.Reset()
			if err := enc.Encode(e); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(buf.Len()))
	})
	b.Run("encode/gob", func(b *testing.B) {
		b.ReportAllocs()
		var buf bytes.Buffer
		enc := gob.NewEncoder(&buf) // a stream: type information goes out once
		if err := enc.Encode(e); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			buf.Reset()
			if err := enc.Encode(e); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(buf.Len()))
	})

	msg, _ := e.MarshalBARE()
	b.Run("decode/bare", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(msg)))
		var v ts.Envelope
		for b.Loop() {
			if err := v.UnmarshalBARE(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/bare-zerocopy", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(msg)))
		var v ts.Envelope
		var d bare.Decoder
		for b.Loop() {
			d.Reset(msg, bare.Config{ZeroCopy: true})
			v.DecodeBARE(&d)
			if err := d.Finish(); err != nil {
				b.Fatal(err)
			}
		}
	})
	js, _ := json.Marshal(e)
	b.Run("decode/json", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(js)))
		for b.Loop() {
			var v ts.Envelope
			if err := json.Unmarshal(js, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/gob", func(b *testing.B) {
		b.ReportAllocs()
		// One stream holding every message, decoded by one decoder, so
		// type information is paid once as in a real connection.
		var buf bytes.Buffer
		enc := gob.NewEncoder(&buf)
		n := b.N
		for range n {
			if err := enc.Encode(e); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(buf.Len() / n))
		dec := gob.NewDecoder(&buf)
		b.ResetTimer()
		for range n {
			var v ts.Envelope
			if err := dec.Decode(&v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTranscode measures the schema-driven JSON path used by the CLI
// and the HTTP gateway, against encoding/json into the generated type.
func BenchmarkTranscode(b *testing.B) {
	s, err := bare.ParseSchemaFile("test.bare")
	if err != nil {
		b.Fatal(err)
	}
	tc := bare.NewTranscoder(s, bare.Config{})
	msg, _ := envelope().MarshalBARE()
	js, err := tc.BAREToJSON("Envelope", msg)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("bare-to-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := tc.BAREToJSON("Envelope", msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json-to-bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := tc.JSONToBARE("Envelope", js); err != nil {
				b.Fatal(err)
			}
		}
	})
}
