package wire

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"
	"testing/iotest"

	"github.com/tempest-actors/tempest/actor"
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
		// Counters at the varints' edges.
		&Tell{To: ActorID{Kind: "k", Key: "x", Incarnation: math.MaxUint64}, Epoch: 1 << 63, Tag: math.MaxUint32},
		&Ask{Id: math.MaxUint64, To: ActorID{Kind: "k", Key: "x", Incarnation: 127}, Epoch: 128, DeadlineNs: math.MaxUint64,
			Chain: []ActorID{{Kind: "a", Key: "b", Incarnation: 1 << 35}}},
		&Reply{Id: 1<<64 - 2},
		&TracedTell{Trace: TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "k=v"},
			Tell: Tell{To: to, From: from, Epoch: 9, Tag: 12, Body: []byte("hi")}},
	}
}

// TestTellHeaderIsCompact pins the size of the common tell, so a change
// that widens the header shows: to a virtual actor, no sender, a small
// epoch, a 100-byte payload message (its body is 101 bytes).
func TestTellHeaderIsCompact(t *testing.T) {
	body := bare.AppendData(nil, make([]byte, 100))
	b, err := MarshalEnvelope(&Tell{To: ActorIDOf(actor.Virtual("sink", "1")), Epoch: 42, Tag: 100, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	// union tag 1, ActorID 1+4 + 1+1 + 1, no sender 1, epoch 1, tag 4,
	// body length 1 + 101
	if want := 1 + 8 + 1 + 1 + 4 + 1 + 101; len(b) != want {
		t.Fatalf("tell frame is %d bytes, want %d", len(b), want)
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
		// Read in runs, as the lane reader does: the same frames, each
		// intact once its run is complete.
		var one [][]byte
		fr = newFrameReader(bytes.NewReader(b), 16, 64)
		for {
			p, err := fr.next()
			if err != nil {
				break
			}
			one = append(one, bytes.Clone(p))
		}
		var runs [][]byte
		fr = newFrameReader(iotest.HalfReader(bytes.NewReader(b)), 16, 64)
		for {
			p, err := fr.next()
			if err != nil {
				break
			}
			run := [][]byte{p}
			for fr.ready() {
				if p, err = fr.next(); err != nil {
					break
				}
				run = append(run, p)
			}
			for _, p := range run {
				runs = append(runs, bytes.Clone(p))
			}
			if err != nil {
				break
			}
		}
		if len(one) != len(runs) {
			t.Fatalf("%d frames one at a time, %d in runs", len(one), len(runs))
		}
		for i := range one {
			if !bytes.Equal(one[i], runs[i]) {
				t.Fatalf("frame %d differs when read in runs", i)
			}
		}
	})
}
