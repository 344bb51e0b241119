package bare

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// Defaults for Config.
const (
	DefaultMaxMessageBytes = 4 << 20
	DefaultMaxDepth        = 64
)

// Config bounds what a Decoder accepts. The zero value means "defaults".
type Config struct {
	// MaxMessageBytes is the largest message accepted, and so the largest
	// length or count any single value may claim. Default 4 MiB.
	MaxMessageBytes int
	// MaxDepth bounds nesting of aggregate values (structs, unions,
	// optionals, lists, maps) so recursive schemas cannot exhaust the
	// stack. Default 64.
	MaxDepth int
	// ZeroCopy makes variable-length data values alias the input instead
	// of copying it. The caller must then keep the input unchanged for as
	// long as decoded values are in use, and must not decode into the same
	// target again without ZeroCopy: that copy would reuse, and so
	// overwrite, the aliased input.
	ZeroCopy bool
}

// DefaultConfig returns the default decoding limits.
func DefaultConfig() Config {
	return Config{MaxMessageBytes: DefaultMaxMessageBytes, MaxDepth: DefaultMaxDepth}
}

// ErrInvalidConfig is returned by Config.Validate.
var ErrInvalidConfig = errors.New("bare: invalid config")

// Validate reports a negative limit.
func (c Config) Validate() error {
	if c.MaxMessageBytes < 0 || c.MaxDepth < 0 {
		return fmt.Errorf("%w: negative limit", ErrInvalidConfig)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.MaxDepth == 0 {
		c.MaxDepth = DefaultMaxDepth
	}
	return c
}

// Decoder reads BARE values from a byte slice. Errors are sticky: after the
// first failure every read returns a zero value and Err reports the
// failure, so generated code checks once at the end. A Decoder is not safe
// for concurrent use; Reset lets one be reused without allocating. Create
// one with NewDecoder or Reset: the zero Decoder has no input and limits of
// zero.
type Decoder struct {
	buf   []byte
	off   int
	depth int
	cfg   Config
	err   error
}

// NewDecoder returns a Decoder over b. Invalid limits in cfg are replaced
// by defaults; a message larger than cfg.MaxMessageBytes fails at once.
func NewDecoder(b []byte, cfg Config) *Decoder {
	d := &Decoder{}
	d.Reset(b, cfg)
	return d
}

// Reset makes d read b from the start with cfg.
func (d *Decoder) Reset(b []byte, cfg Config) {
	if cfg.Validate() != nil {
		cfg = DefaultConfig()
	}
	*d = Decoder{buf: b, cfg: cfg.withDefaults()}
	if len(b) > d.cfg.MaxMessageBytes {
		d.fail(0, ErrLimit, fmt.Sprintf("message of %d bytes exceeds %d", len(b), d.cfg.MaxMessageBytes))
	}
}

// Err returns the first error met, or nil.
func (d *Decoder) Err() error { return d.err }

// Offset returns the offset of the next unread byte.
func (d *Decoder) Offset() int { return d.off }

// Remaining returns the number of unread bytes.
func (d *Decoder) Remaining() int { return len(d.buf) - d.off }

// ZeroCopy reports whether data values alias the input.
func (d *Decoder) ZeroCopy() bool { return d.cfg.ZeroCopy }

// Finish returns the sticky error, or ErrTrailingBytes when input is left
// over after a top-level value.
func (d *Decoder) Finish() error {
	if d.err == nil && d.off != len(d.buf) {
		d.fail(d.off, ErrTrailingBytes, fmt.Sprintf("%d bytes", len(d.buf)-d.off))
	}
	return d.err
}

// Fail records a decoding failure at offset off unless one is recorded.
func (d *Decoder) Fail(off int, reason error, detail string) { d.fail(off, reason, detail) }

func (d *Decoder) fail(off int, reason error, detail string) {
	if d.err == nil {
		d.err = &DecodeError{Offset: off, Err: reason, Detail: detail}
	}
	// Park at the end so later reads fail fast and loops stop.
	d.off = len(d.buf)
}

// Enter marks the start of a nested aggregate; it returns false (and
// records ErrDepth) beyond Config.MaxDepth. Pair every Enter with Leave.
func (d *Decoder) Enter() bool {
	d.depth++
	if d.depth > d.cfg.MaxDepth {
		d.fail(d.off, ErrDepth, fmt.Sprintf("more than %d levels", d.cfg.MaxDepth))
		return false
	}
	return true
}

// Leave marks the end of a nested aggregate.
func (d *Decoder) Leave() { d.depth-- }

func (d *Decoder) need(n int) bool {
	if d.err != nil {
		return false
	}
	if n > len(d.buf)-d.off {
		d.fail(d.off, ErrShortInput, fmt.Sprintf("need %d bytes, have %d", n, len(d.buf)-d.off))
		return false
	}
	return true
}

// Uint reads a BARE uint, rejecting overlong, non-minimal and >64-bit
// encodings.
func (d *Decoder) Uint() uint64 {
	if d.off < len(d.buf) && d.buf[d.off] < 0x80 && d.err == nil {
		v := d.buf[d.off] // the common one-byte case
		d.off++
		return uint64(v)
	}
	if d.err != nil {
		return 0
	}
	start := d.off
	var v uint64
	for i := 0; i < 10; i++ {
		if d.off >= len(d.buf) {
			d.fail(start, ErrShortInput, "truncated varint")
			return 0
		}
		c := d.buf[d.off]
		d.off++
		if i == 9 && c > 1 {
			d.fail(start, ErrVarintOverflow, "")
			return 0
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if c == 0 && i > 0 {
				d.fail(start, ErrNonMinimalVarint, "")
				return 0
			}
			return v
		}
	}
	// Ten bytes with the continuation bit still set on the last one.
	d.fail(start, ErrVarintOverflow, "more than 10 bytes")
	return 0
}

// Int reads a BARE int (zig-zag varint).
func (d *Decoder) Int() int64 {
	u := d.Uint()
	return int64(u>>1) ^ -int64(u&1)
}

// U8 reads a u8.
func (d *Decoder) U8() uint8 {
	if !d.need(1) {
		return 0
	}
	v := d.buf[d.off]
	d.off++
	return v
}

// U16 reads a little-endian u16.
func (d *Decoder) U16() uint16 {
	if !d.need(2) {
		return 0
	}
	v := binary.LittleEndian.Uint16(d.buf[d.off:])
	d.off += 2
	return v
}

// U32 reads a little-endian u32.
func (d *Decoder) U32() uint32 {
	if !d.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(d.buf[d.off:])
	d.off += 4
	return v
}

// U64 reads a little-endian u64.
func (d *Decoder) U64() uint64 {
	if !d.need(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(d.buf[d.off:])
	d.off += 8
	return v
}

// I8 reads an i8.
func (d *Decoder) I8() int8 { return int8(d.U8()) }

// I16 reads a little-endian i16.
func (d *Decoder) I16() int16 { return int16(d.U16()) }

// I32 reads a little-endian i32.
func (d *Decoder) I32() int32 { return int32(d.U32()) }

// I64 reads a little-endian i64.
func (d *Decoder) I64() int64 { return int64(d.U64()) }

// F32 reads an IEEE 754 binary32.
func (d *Decoder) F32() float32 { return math.Float32frombits(d.U32()) }

// F64 reads an IEEE 754 binary64.
func (d *Decoder) F64() float64 { return math.Float64frombits(d.U64()) }

// Bool reads one byte that must be 0 or 1.
func (d *Decoder) Bool() bool {
	if !d.need(1) {
		return false
	}
	c := d.buf[d.off]
	if c > 1 {
		d.fail(d.off, ErrInvalidBool, fmt.Sprintf("got 0x%02x", c))
		return false
	}
	d.off++
	return c == 1
}

// Optional reads the tag of an optional and reports whether a value
// follows.
func (d *Decoder) Optional() bool {
	if !d.need(1) {
		return false
	}
	c := d.buf[d.off]
	if c > 1 {
		d.fail(d.off, ErrInvalidOptional, fmt.Sprintf("got 0x%02x", c))
		return false
	}
	d.off++
	return c == 1
}

// length reads a uint length of bytes or items, each item taking at least
// minSize bytes, and checks it against the remaining input and the limit
// before anyone allocates.
func (d *Decoder) length(minSize int) int {
	start := d.off
	n := d.Uint()
	if d.err != nil {
		return 0
	}
	if minSize < 1 {
		minSize = 1
	}
	if n > uint64(d.cfg.MaxMessageBytes) {
		d.fail(start, ErrLimit, fmt.Sprintf("length %d exceeds %d", n, d.cfg.MaxMessageBytes))
		return 0
	}
	if n > uint64((len(d.buf)-d.off)/minSize) {
		d.fail(start, ErrShortInput, fmt.Sprintf("length %d exceeds the %d remaining bytes", n, len(d.buf)-d.off))
		return 0
	}
	return int(n)
}

// Count reads the uint count of a list or map whose items each encode to
// at least minSize bytes. The count is checked against the remaining input
// and the limit, so callers may allocate count items.
func (d *Decoder) Count(minSize int) int { return d.length(minSize) }

// Bytes reads n raw bytes (a data[N] or a known-length region) and returns
// a slice of the input; the caller copies it if needed.
func (d *Decoder) Bytes(n int) []byte {
	if !d.need(n) {
		return nil
	}
	b := d.buf[d.off : d.off+n : d.off+n]
	d.off += n
	return b
}

// Str reads a BARE str, rejecting invalid UTF-8.
func (d *Decoder) Str() string {
	n := d.length(1)
	if d.err != nil {
		return ""
	}
	b := d.buf[d.off : d.off+n]
	if !utf8.Valid(b) {
		d.fail(d.off, ErrInvalidUTF8, "")
		return ""
	}
	d.off += n
	return string(b)
}

// Data reads BARE data. With Config.ZeroCopy the result aliases the
// input; otherwise it is copied into reuse's storage when large enough.
// An empty value with a nil reuse decodes as nil.
func (d *Decoder) Data(reuse []byte) []byte {
	n := d.length(1)
	if d.err != nil {
		return reuse[:0]
	}
	b := d.buf[d.off : d.off+n : d.off+n]
	d.off += n
	if d.cfg.ZeroCopy {
		return b
	}
	if n == 0 && reuse == nil {
		return nil
	}
	return append(reuse[:0], b...)
}

// FixedData fills dst with len(dst) bytes (data[N]).
func (d *Decoder) FixedData(dst []byte) {
	if !d.need(len(dst)) {
		return
	}
	copy(dst, d.buf[d.off:])
	d.off += len(dst)
}

// UnknownEnum records ErrUnknownEnum for value v read at off.
func (d *Decoder) UnknownEnum(off int, typeName string, v uint64) {
	d.fail(off, ErrUnknownEnum, fmt.Sprintf("%s value %d", typeName, v))
}

// UnknownTag records ErrUnknownUnionTag for tag v read at off.
func (d *Decoder) UnknownTag(off int, typeName string, v uint64) {
	d.fail(off, ErrUnknownUnionTag, fmt.Sprintf("%s tag %d", typeName, v))
}

// DuplicateKey records ErrDuplicateMapKey for a key read at off.
func (d *Decoder) DuplicateKey(off int) { d.fail(off, ErrDuplicateMapKey, "") }
