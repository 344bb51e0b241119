package testschema_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tempest-actors/tempest/wire/bare"
	ts "github.com/tempest-actors/tempest/wire/bare/internal/testschema"
)

func mustMarshal(f *testing.F, m interface{ MarshalBARE() ([]byte, error) }) []byte {
	b, err := m.MarshalBARE()
	if err != nil {
		f.Fatal(err)
	}
	return b
}

func checkDecodeErr(t *testing.T, err error, n int) {
	var de *bare.DecodeError
	if !errors.As(err, &de) || de.Offset < 0 || de.Offset > n {
		t.Fatalf("error %v is not a DecodeError within the input", err)
	}
}

// Envelope has no maps, so decode then encode must give back the input.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add(mustMarshal(f, envelope()))
	f.Add(mustMarshal(f, &ts.Envelope{}))
	f.Add([]byte{0x01, 'x', 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, msg []byte) {
		var e ts.Envelope
		if err := e.UnmarshalBARE(msg); err != nil {
			checkDecodeErr(t, err, len(msg))
			return
		}
		out, err := e.MarshalBARE()
		if err != nil || !bytes.Equal(out, msg) {
			t.Fatalf("re-encoded %x, %v; want %x", out, err, msg)
		}
	})
}

// All has maps (encoded sorted), so re-encoding is checked for size and
// for reaching a fixed point.
func FuzzDecodeAll(f *testing.F) {
	f.Add(mustMarshal(f, fullAll()))
	f.Fuzz(func(t *testing.T, msg []byte) {
		var a ts.All
		if err := a.UnmarshalBARE(msg); err != nil {
			checkDecodeErr(t, err, len(msg))
			return
		}
		b1, err := a.MarshalBARE()
		if err != nil || len(b1) != len(msg) {
			t.Fatalf("re-encoded %x, %v from %x", b1, err, msg)
		}
		var a2 ts.All
		if err := a2.UnmarshalBARE(b1); err != nil {
			t.Fatalf("re-encoding %x does not decode: %v", b1, err)
		}
		if b2, err := a2.MarshalBARE(); err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("not a fixed point: %x vs %x, %v", b1, b2, err)
		}
	})
}

// Recursive and union types: decode then encode is the identity.
func FuzzDecodeTreeAndOps(f *testing.F) {
	f.Add(false, mustMarshal(f, &ts.Tree{Label: "a", Kids: []ts.Tree{{Label: "b"}}}))
	f.Add(true, []byte{0x03, 0x00, 0x03, 0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00})
	f.Add(false, bytes.Repeat([]byte{0, 1}, 80))
	f.Fuzz(func(t *testing.T, ops bool, msg []byte) {
		var m interface {
			UnmarshalBARE([]byte) error
			MarshalBARE() ([]byte, error)
		}
		if ops {
			m = new(ts.Ops)
		} else {
			m = new(ts.Tree)
		}
		if err := m.UnmarshalBARE(msg); err != nil {
			checkDecodeErr(t, err, len(msg))
			return
		}
		out, err := m.MarshalBARE()
		if err != nil || !bytes.Equal(out, msg) {
			t.Fatalf("re-encoded %x, %v; want %x", out, err, msg)
		}
	})
}
