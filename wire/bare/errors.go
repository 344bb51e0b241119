package bare

import (
	"errors"
	"fmt"
)

// Reasons a decoder rejects its input. A *DecodeError wraps exactly one of
// them, so callers branch with errors.Is(err, bare.ErrInvalidBool) and read
// the offset with errors.As.
var (
	ErrShortInput        = errors.New("bare: unexpected end of input")
	ErrNonMinimalVarint  = errors.New("bare: non-minimal varint")
	ErrVarintOverflow    = errors.New("bare: varint overflows 64 bits")
	ErrInvalidBool       = errors.New("bare: invalid bool")
	ErrInvalidOptional   = errors.New("bare: invalid optional tag")
	ErrInvalidUTF8       = errors.New("bare: invalid UTF-8")
	ErrUnknownEnum       = errors.New("bare: unknown enum value")
	ErrUnknownUnionTag   = errors.New("bare: unknown union tag")
	ErrDuplicateMapKey   = errors.New("bare: duplicate map key")
	ErrLimit             = errors.New("bare: limit exceeded")
	ErrDepth             = errors.New("bare: nesting too deep")
	ErrTrailingBytes     = errors.New("bare: trailing bytes after value")
	ErrIntegerOutOfRange = errors.New("bare: integer out of range")
)

// Reasons an encoder refuses a value.
var (
	// ErrNilUnion is returned when a union-typed value is nil.
	ErrNilUnion = errors.New("bare: nil union value")
	// ErrInvalidValue is returned for a value the schema cannot carry, such
	// as an enum constant that is not declared.
	ErrInvalidValue = errors.New("bare: invalid value")
)

// DecodeError reports why and where a decoder rejected its input.
type DecodeError struct {
	// Offset is the byte offset, from the start of the message, of the
	// value that was rejected.
	Offset int
	// Err is one of the sentinel reasons above (ErrShortInput, ...).
	Err error
	// Detail is an optional human-readable addition ("got 0x02").
	Detail string
}

func (e *DecodeError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("offset %d: %v", e.Offset, e.Err)
	}
	return fmt.Sprintf("offset %d: %v: %s", e.Offset, e.Err, e.Detail)
}

// Unwrap returns the sentinel reason.
func (e *DecodeError) Unwrap() error { return e.Err }

// EncodeError reports a value that could not be encoded, with the path of
// the offending field ("Orders[3].Quantity").
type EncodeError struct {
	Path string
	Err  error
}

func (e *EncodeError) Error() string {
	if e.Path == "" {
		return e.Err.Error()
	}
	return e.Path + ": " + e.Err.Error()
}

// Unwrap returns the sentinel reason.
func (e *EncodeError) Unwrap() error { return e.Err }

// WrapEncodeError prefixes the path of err with elem, building paths from
// the inside out as an error travels up through generated encoders. A nil
// err stays nil.
func WrapEncodeError(elem string, err error) error {
	if err == nil {
		return nil
	}
	var ee *EncodeError
	if errors.As(err, &ee) {
		if elem == "" {
			return ee
		}
		p := ee.Path
		switch {
		case p == "":
			p = elem
		case p[0] == '[':
			p = elem + p
		default:
			p = elem + "." + p
		}
		return &EncodeError{Path: p, Err: ee.Err}
	}
	return &EncodeError{Path: elem, Err: err}
}
