package wire

import (
	"errors"
	"fmt"

	"github.com/tempest-actors/tempest/wire/bare"
)

// The Hello exchange is the first thing on every link: the dialer opens a
// bidirectional stream, sends one frame holding a Hello and closes its
// side; the acceptor answers with one frame holding a HelloReply and
// closes its side. Both types are declared in envelope.bare. Frames on the
// Hello stream use the lane framing (uvarint length prefix).

// maxHelloSize bounds a Hello or HelloReply frame.
const maxHelloSize = 4096

var errBadHello = errors.New("wire: malformed hello")

var helloDecoding = bare.Config{MaxMessageBytes: maxHelloSize}

func encodeHello(h Hello) []byte {
	b, err := h.AppendBARE(nil)
	if err != nil { // only invalid UTF-8 in the name; names are validated
		panic(fmt.Sprintf("wire: encode hello: %v", err))
	}
	return b
}

func decodeHello(b []byte) (Hello, error) {
	var h Hello
	var d bare.Decoder
	d.Reset(b, helloDecoding)
	h.DecodeBARE(&d)
	if err := d.Finish(); err != nil {
		return h, fmt.Errorf("%w: %w", errBadHello, err)
	}
	return h, nil
}

func encodeHelloReply(status HelloStatus, h Hello) []byte {
	r := HelloReply{Status: status, Hello: h}
	b, err := r.AppendBARE(nil)
	if err != nil {
		panic(fmt.Sprintf("wire: encode hello reply: %v", err))
	}
	return b
}

func decodeHelloReply(b []byte) (HelloStatus, Hello, error) {
	var r HelloReply
	var d bare.Decoder
	d.Reset(b, helloDecoding)
	r.DecodeBARE(&d)
	if err := d.Finish(); err != nil {
		return 0, Hello{}, fmt.Errorf("%w: %w", errBadHello, err)
	}
	return r.Status, r.Hello, nil
}

// singleFrame decodes b as exactly one length-prefixed frame.
func singleFrame(b []byte) ([]byte, error) {
	n, k := uvarint(b)
	if k <= 0 || n != uint64(len(b)-k) {
		return nil, errBadHello
	}
	return b[k:], nil
}

// uvarint decodes a minimal uvarint, returning k <= 0 on bad input.
func uvarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		c := b[i]
		if i == 9 && c > 1 {
			return 0, -1
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if c == 0 && i > 0 {
				return 0, -1
			}
			return v, i + 1
		}
	}
	return 0, -1
}
