package bare

import (
	"encoding/binary"
	"math"
	"unicode/utf8"
)

// The Append functions encode one BARE primitive at the end of dst and
// return the extended slice, in the style of strconv.AppendInt. They never
// allocate when dst has spare capacity and are safe for concurrent use on
// distinct slices.

// AppendUint appends v as a BARE uint: LEB128, 1 to 10 bytes, minimal.
func AppendUint(dst []byte, v uint64) []byte {
	if v < 0x80 {
		return append(dst, byte(v))
	}
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

// AppendInt appends v as a BARE int: zig-zag, then uint.
func AppendInt(dst []byte, v int64) []byte {
	return AppendUint(dst, uint64(v<<1)^uint64(v>>63))
}

// UintSize returns the number of bytes AppendUint writes for v.
func UintSize(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// AppendU8 appends v as a BARE u8.
func AppendU8(dst []byte, v uint8) []byte { return append(dst, v) }

// AppendU16 appends v as a little-endian BARE u16.
func AppendU16(dst []byte, v uint16) []byte { return binary.LittleEndian.AppendUint16(dst, v) }

// AppendU32 appends v as a little-endian BARE u32.
func AppendU32(dst []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(dst, v) }

// AppendU64 appends v as a little-endian BARE u64.
func AppendU64(dst []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(dst, v) }

// AppendI8 appends v as a BARE i8 (two's complement).
func AppendI8(dst []byte, v int8) []byte { return append(dst, byte(v)) }

// AppendI16 appends v as a little-endian BARE i16.
func AppendI16(dst []byte, v int16) []byte { return AppendU16(dst, uint16(v)) }

// AppendI32 appends v as a little-endian BARE i32.
func AppendI32(dst []byte, v int32) []byte { return AppendU32(dst, uint32(v)) }

// AppendI64 appends v as a little-endian BARE i64.
func AppendI64(dst []byte, v int64) []byte { return AppendU64(dst, uint64(v)) }

// AppendF32 appends v as an IEEE 754 binary32, little-endian.
func AppendF32(dst []byte, v float32) []byte { return AppendU32(dst, math.Float32bits(v)) }

// AppendF64 appends v as an IEEE 754 binary64, little-endian.
func AppendF64(dst []byte, v float64) []byte { return AppendU64(dst, math.Float64bits(v)) }

// AppendBool appends v as one byte, 0 or 1.
func AppendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// AppendString appends s as a BARE str (uint length, then the bytes)
// without checking that s is UTF-8; use AppendStr when s is untrusted.
func AppendString(dst []byte, s string) []byte {
	dst = AppendUint(dst, uint64(len(s)))
	return append(dst, s...)
}

// AppendStr appends s as a BARE str, refusing invalid UTF-8 with
// ErrInvalidUTF8 (dst is then returned unchanged).
func AppendStr(dst []byte, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return dst, ErrInvalidUTF8
	}
	return AppendString(dst, s), nil
}

// AppendData appends b as BARE data (uint length, then the bytes).
func AppendData(dst []byte, b []byte) []byte {
	dst = AppendUint(dst, uint64(len(b)))
	return append(dst, b...)
}

// AppendFixedData appends b as BARE data[len(b)]: the bytes, no prefix.
func AppendFixedData(dst []byte, b []byte) []byte { return append(dst, b...) }

// AppendOptional appends the one-byte tag of an optional: 1 when present.
func AppendOptional(dst []byte, present bool) []byte { return AppendBool(dst, present) }
