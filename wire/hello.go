package wire

import (
	"encoding/binary"
	"errors"
	"unicode/utf8"
)

// The Hello exchange is the first thing on every link: the dialer opens a
// bidirectional stream and sends a Hello frame; the acceptor answers with a
// HelloReply frame. Both are encoded by hand in BARE form until the
// envelope schema is generated:
//
//	type Hello struct {
//	  version: uint
//	  name: string
//	  manifestDigest: data
//	}
//	type HelloReply struct {
//	  status: uint   # 0 accepted, 1 duplicate (lost the dial tie-break), 2 rejected
//	  hello: Hello
//	}
//
// Frames on the Hello stream use the lane framing (uvarint length prefix).

type hello struct {
	Version        uint64
	Name           string
	ManifestDigest []byte
}

const (
	helloAccepted  = 0
	helloDuplicate = 1
	helloRejected  = 2
)

// maxHelloSize bounds a Hello frame.
const maxHelloSize = 4096

var errBadHello = errors.New("wire: malformed hello")

func (h hello) appendTo(b []byte) []byte {
	b = binary.AppendUvarint(b, h.Version)
	b = binary.AppendUvarint(b, uint64(len(h.Name)))
	b = append(b, h.Name...)
	b = binary.AppendUvarint(b, uint64(len(h.ManifestDigest)))
	b = append(b, h.ManifestDigest...)
	return b
}

// readUvarint decodes a minimal uvarint as BARE requires.
func readUvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, errBadHello
	}
	if n > 1 && b[n-1] == 0 { // non-minimal encoding
		return 0, nil, errBadHello
	}
	return v, b[n:], nil
}

func readBytes(b []byte) ([]byte, []byte, error) {
	n, rest, err := readUvarint(b)
	if err != nil {
		return nil, nil, err
	}
	if n > uint64(len(rest)) {
		return nil, nil, errBadHello
	}
	return rest[:n], rest[n:], nil
}

func (h *hello) decode(b []byte) ([]byte, error) {
	var err error
	if h.Version, b, err = readUvarint(b); err != nil {
		return nil, err
	}
	var name, dig []byte
	if name, b, err = readBytes(b); err != nil {
		return nil, err
	}
	if !utf8.Valid(name) {
		return nil, errBadHello
	}
	if dig, b, err = readBytes(b); err != nil {
		return nil, err
	}
	h.Name = string(name)
	h.ManifestDigest = append([]byte(nil), dig...)
	return b, nil
}

func decodeHello(b []byte) (hello, error) {
	var h hello
	rest, err := h.decode(b)
	if err != nil {
		return h, err
	}
	if len(rest) != 0 {
		return h, errBadHello
	}
	return h, nil
}

func encodeHelloReply(status uint64, h hello) []byte {
	b := binary.AppendUvarint(nil, status)
	return h.appendTo(b)
}

func decodeHelloReply(b []byte) (uint64, hello, error) {
	status, rest, err := readUvarint(b)
	if err != nil {
		return 0, hello{}, err
	}
	h, err := decodeHello(rest)
	return status, h, err
}
