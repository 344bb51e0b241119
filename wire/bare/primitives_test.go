package bare_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"testing"

	"github.com/tempest-actors/tempest/wire/bare"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Hand-computed encodings of every primitive.
func TestPrimitiveVectors(t *testing.T) {
	type vec struct {
		name string
		enc  func([]byte) []byte
		dec  func(*bare.Decoder) any
		want any
		hex  string
	}
	u := func(v uint64) vec {
		return vec{"uint", func(b []byte) []byte { return bare.AppendUint(b, v) }, func(d *bare.Decoder) any { return d.Uint() }, v, ""}
	}
	i := func(v int64) vec {
		return vec{"int", func(b []byte) []byte { return bare.AppendInt(b, v) }, func(d *bare.Decoder) any { return d.Int() }, v, ""}
	}
	with := func(v vec, h string) vec { v.hex = h; return v }
	vecs := []vec{
		with(u(0), "00"),
		with(u(1), "01"),
		with(u(127), "7f"),
		with(u(128), "8001"),
		with(u(300), "ac02"),
		with(u(16384), "808001"),
		with(u(math.MaxUint32), "ffffffff0f"),
		with(u(1<<63), "80808080808080808001"),
		with(u(math.MaxUint64), "ffffffffffffffffff01"),
		with(i(0), "00"),
		with(i(-1), "01"),
		with(i(1), "02"),
		with(i(-2), "03"),
		with(i(63), "7e"),
		with(i(-64), "7f"),
		with(i(64), "8001"),
		with(i(math.MaxInt64), "feffffffffffffffff01"),
		with(i(math.MinInt64), "ffffffffffffffffff01"),
		{"u8", func(b []byte) []byte { return bare.AppendU8(b, 0xab) }, func(d *bare.Decoder) any { return d.U8() }, uint8(0xab), "ab"},
		{"u16", func(b []byte) []byte { return bare.AppendU16(b, 0x1234) }, func(d *bare.Decoder) any { return d.U16() }, uint16(0x1234), "3412"},
		{"u32", func(b []byte) []byte { return bare.AppendU32(b, 0x12345678) }, func(d *bare.Decoder) any { return d.U32() }, uint32(0x12345678), "78563412"},
		{"u64", func(b []byte) []byte { return bare.AppendU64(b, 0x0102030405060708) }, func(d *bare.Decoder) any { return d.U64() }, uint64(0x0102030405060708), "0807060504030201"},
		{"i8", func(b []byte) []byte { return bare.AppendI8(b, -2) }, func(d *bare.Decoder) any { return d.I8() }, int8(-2), "fe"},
		{"i16", func(b []byte) []byte { return bare.AppendI16(b, -2) }, func(d *bare.Decoder) any { return d.I16() }, int16(-2), "feff"},
		{"i32", func(b []byte) []byte { return bare.AppendI32(b, -2) }, func(d *bare.Decoder) any { return d.I32() }, int32(-2), "feffffff"},
		{"i64", func(b []byte) []byte { return bare.AppendI64(b, -2) }, func(d *bare.Decoder) any { return d.I64() }, int64(-2), "feffffffffffffff"},
		{"f32", func(b []byte) []byte { return bare.AppendF32(b, 1.5) }, func(d *bare.Decoder) any { return d.F32() }, float32(1.5), "0000c03f"},
		{"f64", func(b []byte) []byte { return bare.AppendF64(b, -2) }, func(d *bare.Decoder) any { return d.F64() }, float64(-2), "00000000000000c0"},
		{"bool", func(b []byte) []byte { return bare.AppendBool(b, true) }, func(d *bare.Decoder) any { return d.Bool() }, true, "01"},
		{"bool0", func(b []byte) []byte { return bare.AppendBool(b, false) }, func(d *bare.Decoder) any { return d.Bool() }, false, "00"},
		{"str", func(b []byte) []byte { return bare.AppendString(b, "héllo") }, func(d *bare.Decoder) any { return d.Str() }, "héllo", "0668c3a96c6c6f"},
		{"str-empty", func(b []byte) []byte { return bare.AppendString(b, "") }, func(d *bare.Decoder) any { return d.Str() }, "", "00"},
		{"data", func(b []byte) []byte { return bare.AppendData(b, []byte{1, 2, 3}) }, func(d *bare.Decoder) any { return string(d.Data(nil)) }, "\x01\x02\x03", "03010203"},
		{"data[4]", func(b []byte) []byte { return bare.AppendFixedData(b, []byte{1, 2, 3, 4}) }, func(d *bare.Decoder) any { var a [4]byte; d.FixedData(a[:]); return a }, [4]byte{1, 2, 3, 4}, "01020304"},
	}
	for _, v := range vecs {
		got := v.enc(nil)
		if hex.EncodeToString(got) != v.hex {
			t.Errorf("%s %v: encoded %x, want %s", v.name, v.want, got, v.hex)
		}
		d := bare.NewDecoder(unhex(t, v.hex), bare.Config{})
		val := v.dec(d)
		if err := d.Finish(); err != nil {
			t.Errorf("%s %s: %v", v.name, v.hex, err)
			continue
		}
		if val != v.want {
			t.Errorf("%s %s: decoded %v, want %v", v.name, v.hex, val, v.want)
		}
	}
}

func TestUintSize(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 1 << 14, 1<<63 - 1, math.MaxUint64} {
		if got, want := bare.UintSize(v), len(bare.AppendUint(nil, v)); got != want {
			t.Errorf("UintSize(%d) = %d, want %d", v, got, want)
		}
	}
}

// Invalid inputs are rejected with the right reason at the right offset.
func TestPrimitiveRejects(t *testing.T) {
	cases := []struct {
		name   string
		hex    string
		read   func(*bare.Decoder)
		reason error
		offset int
	}{
		{"uint empty", "", func(d *bare.Decoder) { d.Uint() }, bare.ErrShortInput, 0},
		{"uint truncated", "80", func(d *bare.Decoder) { d.Uint() }, bare.ErrShortInput, 0},
		{"uint non-minimal 2", "8000", func(d *bare.Decoder) { d.Uint() }, bare.ErrNonMinimalVarint, 0},
		{"uint non-minimal 3", "ff8000", func(d *bare.Decoder) { d.Uint() }, bare.ErrNonMinimalVarint, 0},
		{"uint 10th byte 2", "ffffffffffffffffff02", func(d *bare.Decoder) { d.Uint() }, bare.ErrVarintOverflow, 0},
		{"uint 11 bytes", "ffffffffffffffffff8101", func(d *bare.Decoder) { d.Uint() }, bare.ErrVarintOverflow, 0},
		{"uint 10 bytes non-minimal", "80808080808080808000", func(d *bare.Decoder) { d.Uint() }, bare.ErrNonMinimalVarint, 0},
		{"int non-minimal", "0180", func(d *bare.Decoder) { d.U8(); d.Int() }, bare.ErrShortInput, 1},
		{"u16 short", "01", func(d *bare.Decoder) { d.U16() }, bare.ErrShortInput, 0},
		{"u32 short", "010203", func(d *bare.Decoder) { d.U32() }, bare.ErrShortInput, 0},
		{"u64 short", "01020304050607", func(d *bare.Decoder) { d.U64() }, bare.ErrShortInput, 0},
		{"f64 short", "00", func(d *bare.Decoder) { d.F64() }, bare.ErrShortInput, 0},
		{"bool 2", "0002", func(d *bare.Decoder) { d.Bool(); d.Bool() }, bare.ErrInvalidBool, 1},
		{"bool ff", "ff", func(d *bare.Decoder) { d.Bool() }, bare.ErrInvalidBool, 0},
		{"optional 2", "02", func(d *bare.Decoder) { d.Optional() }, bare.ErrInvalidOptional, 0},
		{"str bad utf8", "02c328", func(d *bare.Decoder) { d.Str() }, bare.ErrInvalidUTF8, 1},
		{"str surrogate", "03eda080", func(d *bare.Decoder) { d.Str() }, bare.ErrInvalidUTF8, 1},
		{"str too long", "0561", func(d *bare.Decoder) { d.Str() }, bare.ErrShortInput, 0},
		{"data too long", "ffffffff0f00", func(d *bare.Decoder) { d.Data(nil) }, bare.ErrLimit, 0},
		{"count beyond input", "0301", func(d *bare.Decoder) { d.Count(1) }, bare.ErrShortInput, 0},
		{"count beyond input by min size", "02010203", func(d *bare.Decoder) { d.Count(2) }, bare.ErrShortInput, 0},
		{"fixed data short", "0102", func(d *bare.Decoder) { d.FixedData(make([]byte, 3)) }, bare.ErrShortInput, 0},
		{"trailing", "0000", func(d *bare.Decoder) { d.Uint() }, bare.ErrTrailingBytes, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := bare.NewDecoder(unhex(t, c.hex), bare.Config{})
			c.read(d)
			err := d.Finish()
			if !errors.Is(err, c.reason) {
				t.Fatalf("err = %v, want %v", err, c.reason)
			}
			var de *bare.DecodeError
			if !errors.As(err, &de) || de.Offset != c.offset {
				t.Fatalf("err = %#v, want offset %d", err, c.offset)
			}
		})
	}
}

func TestMessageLimit(t *testing.T) {
	d := bare.NewDecoder(make([]byte, 11), bare.Config{MaxMessageBytes: 10})
	d.U8()
	if err := d.Err(); !errors.Is(err, bare.ErrLimit) {
		t.Fatalf("err = %v, want ErrLimit", err)
	}
	// A length within the input but over the limit.
	d = bare.NewDecoder(append([]byte{8}, make([]byte, 8)...), bare.Config{MaxMessageBytes: 100, MaxDepth: 1})
	d.Reset(append([]byte{8}, make([]byte, 8)...), bare.Config{MaxMessageBytes: 9})
	if d.Data(nil); d.Err() != nil {
		t.Fatalf("within limit: %v", d.Err())
	}
}

func TestDepthLimit(t *testing.T) {
	d := bare.NewDecoder(nil, bare.Config{MaxDepth: 2})
	if !d.Enter() || !d.Enter() {
		t.Fatal("depth 2 refused")
	}
	if d.Enter() {
		t.Fatal("depth 3 accepted")
	}
	if !errors.Is(d.Err(), bare.ErrDepth) {
		t.Fatalf("err = %v", d.Err())
	}
}

func TestStickyError(t *testing.T) {
	d := bare.NewDecoder([]byte{2, 5, 6}, bare.Config{})
	d.Bool()
	if v := d.U16(); v != 0 {
		t.Fatalf("read after error returned %d", v)
	}
	var de *bare.DecodeError
	if !errors.As(d.Err(), &de) || de.Offset != 0 {
		t.Fatalf("first error lost: %v", d.Err())
	}
}

func TestDataZeroCopy(t *testing.T) {
	in := []byte{3, 'a', 'b', 'c'}
	d := bare.NewDecoder(in, bare.Config{ZeroCopy: true})
	got := d.Data(nil)
	if &got[0] != &in[1] {
		t.Fatal("ZeroCopy data does not alias the input")
	}
	d.Reset(in, bare.Config{})
	got = d.Data(nil)
	if &got[0] == &in[1] || !bytes.Equal(got, []byte("abc")) {
		t.Fatalf("copied data = %q or aliases input", got)
	}
}

func TestAppendStrRejectsInvalidUTF8(t *testing.T) {
	if _, err := bare.AppendStr(nil, "\xff"); !errors.Is(err, bare.ErrInvalidUTF8) {
		t.Fatalf("err = %v", err)
	}
}

func TestAppendNoAlloc(t *testing.T) {
	buf := make([]byte, 0, 64)
	n := testing.AllocsPerRun(100, func() {
		b := bare.AppendUint(buf[:0], math.MaxUint64)
		b = bare.AppendString(b, "hello")
		b = bare.AppendF64(b, 1)
		_ = b
	})
	if n != 0 {
		t.Fatalf("%v allocs", n)
	}
}
