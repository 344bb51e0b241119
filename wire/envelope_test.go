package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/tempest-actors/tempest/wire/bare"
	"github.com/tempest-actors/tempest/wire/bare/gen"
)

func TestEnvelopeCodeIsFresh(t *testing.T) {
	if err := gen.CheckFile("envelope.bare", "envelope_bare.go", "wire"); err != nil {
		t.Fatalf("%v (run go generate ./wire)", err)
	}
}

func sampleEnvelopes() []Envelope {
	to := ActorID{Kind: "counter", Key: "c-1", Incarnation: 3}
	from := &ActorID{Kind: "client", Key: "k"}
	return []Envelope{
		&Tell{To: to, From: from, Epoch: 9, Tag: 12, Body: []byte("hi")},
		&Ask{Id: 77, To: to, Epoch: 9, DeadlineNs: 5e9, Tag: 13, Body: []byte{1, 2, 3}},
		&Reply{Id: 77, Tag: 14, Body: []byte("ok")},
		&Refused{Id: 77, To: to, Tag: 13, Reason: RefusedReasonMailboxFull, Detail: "1024 queued"},
		&Refused{To: to, Reason: RefusedReasonNotOwner, OwnerHint: "node-2"},
		&HandoffBegin{Shard: 4, Epoch: 10, From: "a", To: "b"},
		&StateTransfer{Shard: 4, Epoch: 10, Seq: 1, Actor: to, State: []byte("state")},
		&HandoffDone{Shard: 4, Epoch: 10, Count: 1},
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	for _, e := range sampleEnvelopes() {
		b, err := MarshalEnvelope(e)
		if err != nil {
			t.Fatalf("%T: %v", e, err)
		}
		got, err := UnmarshalEnvelope(b)
		if err != nil {
			t.Fatalf("%T: %v", e, err)
		}
		if !reflect.DeepEqual(normalize(got), normalize(e)) {
			t.Errorf("%T: got %+v, want %+v", e, got, e)
		}
	}
}

// normalize maps empty slices to nil so DeepEqual compares values.
func normalize(e Envelope) Envelope {
	b, _ := MarshalEnvelope(e)
	return envelopeBytes(b)
}

type envelopeBytes []byte

func (envelopeBytes) isEnvelope() {}

func TestEnvelopeRejectsUnknownTag(t *testing.T) {
	_, err := UnmarshalEnvelope([]byte{0x05})
	if err == nil {
		t.Fatal("unknown union tag accepted")
	}
	var de *bare.DecodeError
	if !errors.As(err, &de) {
		t.Errorf("got %T %v, want *bare.DecodeError", err, err)
	}
}

func TestHelloCodec(t *testing.T) {
	h := Hello{Version: ProtocolVersion, Name: "node-1", ManifestDigest: []byte{0xde, 0xad}}
	got, err := decodeHello(encodeHello(h))
	if err != nil || got.Name != h.Name || got.Version != h.Version || !bytes.Equal(got.ManifestDigest, h.ManifestDigest) {
		t.Fatalf("hello round trip: %+v, %v", got, err)
	}
	st, rh, err := decodeHelloReply(encodeHelloReply(HelloStatusDuplicate, h))
	if err != nil || st != HelloStatusDuplicate || rh.Name != h.Name {
		t.Fatalf("reply round trip: %v %+v %v", st, rh, err)
	}
	if _, err := decodeHello(append(encodeHello(h), 0)); !errors.Is(err, errBadHello) {
		t.Errorf("trailing byte: got %v", err)
	}
	if _, _, err := decodeHelloReply(append([]byte{7}, encodeHello(h)...)); err == nil {
		t.Error("undeclared reply status accepted")
	}
}

func FuzzEnvelope(f *testing.F) {
	for _, e := range sampleEnvelopes() {
		b, _ := MarshalEnvelope(e)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := UnmarshalEnvelope(b)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to the same bytes: BARE is canonical.
		out, err := MarshalEnvelope(e)
		if err != nil {
			t.Fatalf("re-encode %T: %v", e, err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("not canonical: %x -> %x", b, out)
		}
	})
}

func FuzzFrameReader(f *testing.F) {
	f.Add(appendFrame(appendFrame(nil, []byte("a")), []byte("bc")))
	f.Add([]byte{0x80, 0x00})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr := newFrameReader(bytes.NewReader(b), 16, 64)
		total := 0
		for {
			p, err := fr.next()
			if err != nil {
				break
			}
			if len(p) > 64 {
				t.Fatalf("frame of %d bytes beyond the limit", len(p))
			}
			total += len(p)
		}
		if total > len(b) {
			t.Fatalf("read %d payload bytes from %d input bytes", total, len(b))
		}
	})
}
