package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
)

// Framing. Every lane stream starts with one byte, the lane number, and
// then carries frames, each a uvarint length (the BARE uint encoding:
// little-endian base-128, minimal) followed by that many bytes. The length
// is checked against the maximum frame size before any payload is read or
// allocated.

var (
	errFrameTooLarge = errors.New("wire: inbound frame too large")
	errBadLength     = errors.New("wire: malformed frame length")
)

// appendFrame appends the framed form of frame to b.
func appendFrame(b, frame []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(frame)))
	return append(b, frame...)
}

// frameReader reads frames from one stream. It is not safe for concurrent
// use.
type frameReader struct {
	r       *bufio.Reader
	max     int
	scratch []byte
	discard int // bytes of the last peeked frame still in r
}

func newFrameReader(r io.Reader, bufSize, max int) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, bufSize), max: max}
}

// next returns the next frame. The slice is only valid until the next call.
// It returns io.EOF at a clean end of stream, errFrameTooLarge or
// errBadLength for bad input, and the stream's error otherwise.
func (fr *frameReader) next() ([]byte, error) {
	if fr.discard > 0 {
		if _, err := fr.r.Discard(fr.discard); err != nil {
			return nil, err
		}
		fr.discard = 0
	}
	n, err := fr.readLen()
	if err != nil {
		return nil, err
	}
	if n > uint64(fr.max) {
		return nil, errFrameTooLarge
	}
	size := int(n)
	if size <= fr.r.Size() {
		p, err := fr.r.Peek(size)
		if err != nil {
			return nil, noEOF(err)
		}
		fr.discard = size
		return p, nil
	}
	if cap(fr.scratch) < size {
		fr.scratch = make([]byte, size)
	}
	p := fr.scratch[:size]
	if _, err := io.ReadFull(fr.r, p); err != nil {
		return nil, noEOF(err)
	}
	return p, nil
}

// ready reports whether the next frame is whole in the buffer and fits
// it, so next returns it without reading from the stream. Frames returned
// while ready held stay valid together: only a read from the stream moves
// the buffer's contents. A length that does not parse is not ready: next
// reports it.
func (fr *frameReader) ready() bool {
	buf, _ := fr.r.Peek(fr.r.Buffered()) // never reads: at most what is buffered
	if fr.discard > len(buf) {
		return false
	}
	rest := buf[fr.discard:]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(fr.max) || n > uint64(fr.r.Size()) {
		return false
	}
	return uint64(len(rest)-k) >= n
}

// readLen reads a minimal uvarint of at most 10 bytes.
func (fr *frameReader) readLen() (uint64, error) {
	var v uint64
	for i := 0; i < binary.MaxVarintLen64; i++ {
		c, err := fr.r.ReadByte()
		if err != nil {
			if i > 0 {
				return 0, noEOF(err)
			}
			return 0, err
		}
		if i == binary.MaxVarintLen64-1 && c > 1 {
			return 0, errBadLength
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if c == 0 && i > 0 {
				return 0, errBadLength // non-minimal
			}
			return v, nil
		}
	}
	return 0, errBadLength
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
