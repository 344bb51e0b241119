// Package bare is Tempest's codec for BARE (Binary Application Record
// Encoding, the IETF draft draft-devault-bare): the encoding of every
// message that crosses a node boundary and of every actor state at rest.
//
// The package has four parts.
//
// Primitives. AppendUint, AppendInt, AppendU8…AppendI64, AppendF32,
// AppendF64, AppendBool, AppendStr, AppendData and AppendFixedData append
// one value to a byte slice, strconv-style, without allocating when the
// slice has room. A Decoder reads the same values from a []byte; its
// errors are sticky, so code reads a whole value and checks Err (or Finish,
// which also rejects trailing bytes) once:
//
//	d := bare.NewDecoder(msg, bare.Config{})
//	id := d.Uint()
//	name := d.Str()
//	if err := d.Finish(); err != nil { … }
//
// Strictness. Decoders never panic and never trust a length: they reject
// non-minimal, overlong and >64-bit varints, bools and optional tags other
// than 0/1, invalid UTF-8, unknown enum values and union tags, duplicate
// map keys, lengths and counts beyond the remaining input or
// Config.MaxMessageBytes (checked before allocating), nesting beyond
// Config.MaxDepth, and trailing bytes. Every failure is a *DecodeError
// carrying the byte offset and one sentinel reason (ErrShortInput,
// ErrNonMinimalVarint, …) for errors.Is.
//
// Schemas. ParseSchema reads the draft's schema language
//
//	type PublicKey data[128]
//	type Department enum { ACCOUNTING DEVELOPMENT = 3 }
//	type Customer struct { name: str orders: list<struct { id: i64 }> }
//	type Get void
//	type Op union { Get | Customer = 4 }
//
// and reports errors as file:line:col. The gen subpackage and the
// cmd/baregen command turn a schema into Go types with AppendBARE and
// DecodeBARE methods (no reflection); run it with go generate:
//
//	//go:generate go run github.com/tempest-actors/tempest/wire/bare/cmd/baregen -schema envelope.bare -package wire -out envelope_bare.go
//
// and keep the output fresh with gen.CheckFile in a test.
//
// JSON. Transcoder converts JSON to BARE and back for any type of a
// schema, without generated code; the tempest bare command and the HTTP
// gateway use it.
//
// Everything here is safe for concurrent use except a Decoder, which
// belongs to one goroutine at a time. Parsed schemas are immutable.
package bare
