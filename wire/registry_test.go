package wire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/tempest-actors/tempest/actor"
)

func TestRegistryRoundTrip(t *testing.T) {
	r := testRegistry(t)
	if err := RegisterCodec(r, 7,
		func(dst []byte, s string) ([]byte, error) { return append(dst, s...), nil },
		func(b []byte) (string, error) { return string(b), nil }); err != nil {
		t.Fatal(err)
	}
	for _, msg := range []any{testPing{Kind: "x", TurnBudgetNs: 3}, &testPong{Shard: 1, Count: 2}, "hello", nil} {
		tag, body, err := r.Append(nil, msg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.Decode(tag, body)
		if err != nil {
			t.Fatal(err)
		}
		want := msg
		if p, ok := msg.(*testPong); ok {
			want = *p // pointers arrive as values
		}
		if got != want {
			t.Fatalf("round trip of %#v = %#v", msg, got)
		}
	}
	if tag, ok := r.Tag(testPing{}); !ok || tag != 100 {
		t.Fatalf("Tag(testPing) = %d, %v", tag, ok)
	}
	if _, ok := r.Tag(3.5); ok {
		t.Fatal("float64 has a tag")
	}
}

func TestRegistryRefusesDuplicatesAndReserved(t *testing.T) {
	r := testRegistry(t)
	if err := Register[testPing](r, 200); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("same type twice: %v", err)
	}
	if err := Register[Hello](r, 100); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("same tag twice: %v", err)
	}
	for _, tag := range []uint32{0, MaxUserTag + 1, TagError, TagNil} {
		if err := Register[Hello](r, tag); !errors.Is(err, ErrReservedTag) {
			t.Fatalf("tag %#x: %v", tag, err)
		}
	}
	if _, err := r.Decode(555, nil); !errors.Is(err, ErrUnknownTag) || !errors.Is(err, actor.ErrUnknownKind) {
		t.Fatalf("unknown tag: %v", err)
	}
	if _, err := r.Decode(100, []byte{0xff}); err == nil {
		t.Fatal("malformed body decoded")
	}
	if _, err := r.Decode(TagNil, []byte{1}); err == nil {
		t.Fatal("nil with a body decoded")
	}
	// The sentinels the wire carries by codes of its own cannot take an
	// application code (an error matching one would cross as both).
	for _, e := range []error{actor.ErrRefused, actor.ErrDeadlineExceeded, actor.ErrNotCommitted, context.Canceled} {
		if err := r.RegisterError("app.x", e); !errors.Is(err, ErrBadErrorCode) || !IsBuiltinError(e) {
			t.Fatalf("RegisterError(%v): %v", e, err)
		}
	}
	if IsBuiltinError(fmt.Errorf("app: %w", actor.ErrRefused)) {
		t.Fatal("an error wrapping a sentinel taken for the sentinel")
	}
}

func TestRegistryLookupDoesNotAllocate(t *testing.T) {
	r := testRegistry(t)
	var msg any = testPing{Kind: "k"}
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { r.Tag(msg) }); n != 0 {
		t.Fatalf("Tag allocates %v times", n)
	}
	// Encoding reads the interface's own copy of the value.
	if n := testing.AllocsPerRun(100, func() { _, _, _ = r.Append(buf[:0], msg) }); n != 0 {
		t.Fatalf("Append allocates %v times", n)
	}
}

func TestErrorCodesCrossTheWire(t *testing.T) {
	for _, s := range []error{actor.ErrRefused, actor.ErrDeadlineExceeded, actor.ErrActorTerminated,
		actor.ErrProcessUnavailable, actor.ErrUnknownKind, actor.ErrNoEligibleNode, actor.ErrNotCommitted} {
		in := fmt.Errorf("ctx: %w", s)
		v, err := DecodeError(AppendError(nil, in))
		if err != nil {
			t.Fatal(err)
		}
		got := v.(*RemoteError)
		if !errors.Is(got, s) || got.Error() != in.Error() {
			t.Fatalf("%v crossed as %v (code %d)", in, got, got.Code)
		}
		// A remote error passed on keeps its code.
		v, _ = DecodeError(AppendError(nil, got))
		if !errors.Is(v.(*RemoteError), s) {
			t.Fatalf("forwarded %v lost its sentinel", got)
		}
	}
	v, _ := DecodeError(AppendError(nil, errors.New("bad \xff utf8")))
	if re := v.(*RemoteError); re.Code != CodeOther || re.Unwrap() != nil {
		t.Fatalf("plain error crossed as %+v", re)
	}
	if _, err := DecodeError([]byte{0xc8, 0x01, 0}); err != nil {
		t.Fatalf("unknown code: %v", err)
	}
}

func TestHasPointers(t *testing.T) {
	type flat struct {
		A int64
		B [4]uint32
	}
	type deep struct {
		F flat
		S [1]string
	}
	for _, c := range []struct {
		t    reflect.Type
		want bool
	}{
		{reflect.TypeFor[flat](), false},
		{reflect.TypeFor[[0]*int](), false},
		{reflect.TypeFor[deep](), true},
		{reflect.TypeFor[benchMsg](), true},
		{reflect.TypeFor[map[int]int](), true},
	} {
		if got := hasPointers(c.t); got != c.want {
			t.Errorf("hasPointers(%v) = %v, want %v", c.t, got, c.want)
		}
	}
}

// TestDecodeSmallDataMessageSharesBlocks: a received message whose only
// pointers are its data and string fields, from a small body, is carved
// from shared blocks (no allocation per message, amortised), and every
// decoded value keeps its own contents.
func TestDecodeSmallDataMessageSharesBlocks(t *testing.T) {
	r := NewRegistry()
	if err := Register[benchMsg](r, 100); err != nil {
		t.Fatal(err)
	}
	body := func(b byte) []byte {
		out, _ := (&benchMsg{Payload: bytes.Repeat([]byte{b}, 100)}).AppendBARE(nil)
		return out
	}
	first, err := r.Decode(100, body(1))
	if err != nil {
		t.Fatal(err)
	}
	b2 := body(2)
	if n := testing.AllocsPerRun(1000, func() { _, _ = r.Decode(100, b2) }); n != 0 {
		t.Fatalf("decoding a small data message allocates %v times per message", n)
	}
	if got := first.(benchMsg).Payload; !bytes.Equal(got, bytes.Repeat([]byte{1}, 100)) {
		t.Fatalf("a decoded value changed when others were decoded: %v", got[:4])
	}
	// A large body's value is allocated alone: its data is not in a
	// shared block, and neighbours in a block of Ts would keep it alive.
	big := (&benchMsg{Payload: make([]byte, maxArenaBody+1)})
	bb, _ := big.AppendBARE(nil)
	if n := testing.AllocsPerRun(100, func() { _, _ = r.Decode(100, bb) }); n < 2 {
		t.Fatalf("a large body's value and data took %v allocations, want their own (2)", n)
	}
}

func TestOnlyFlatRefs(t *testing.T) {
	type blob []byte
	for _, tc := range []struct {
		v    any
		want bool
	}{
		{struct{ A []byte }{}, true},
		{struct {
			A blob
			S string
			N uint64
			F [4]int32
		}{}, true},
		{struct{ A []uint32 }{}, false},
		{struct{ P *int }{}, false},
		{struct{ M map[string]int }{}, false},
		{struct{ In struct{ S string } }{}, false},
		{"a string", false},
	} {
		if got := onlyFlatRefs(reflect.TypeOf(tc.v)); got != tc.want {
			t.Errorf("%T: %v, want %v", tc.v, got, tc.want)
		}
	}
}
