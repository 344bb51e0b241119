package wire

import (
	"bytes"
	"slices"
	"testing"

	"github.com/tempest-actors/tempest/actor"
)

// The Hello and HelloReply are the first bytes a peer sends on a link,
// before anything else is checked; a DeadlockError body arrives in any
// reply. Whatever decodes re-encodes to the same bytes (BARE is
// canonical), and nothing panics.

func FuzzDecodeHello(f *testing.F) {
	f.Add(encodeHello(Hello{Version: ProtocolVersion, Name: "node-1", ManifestDigest: []byte{0xde, 0xad}}))
	f.Add(encodeHello(Hello{}))
	f.Add([]byte{0x01, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{0x01, 0x02, 0xff, 0xfe, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHello(b)
		if err != nil {
			return
		}
		out, err := h.AppendBARE(nil)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", h, err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("not canonical: %x -> %x", b, out)
		}
	})
}

func FuzzDecodeHelloReply(f *testing.F) {
	h := Hello{Version: ProtocolVersion, Name: "node-1", ManifestDigest: []byte{1, 2, 3}}
	for _, s := range []HelloStatus{HelloStatusAccepted, HelloStatusDuplicate, HelloStatusRejected} {
		f.Add(encodeHelloReply(s, h))
	}
	f.Add(append([]byte{7}, encodeHello(h)...))
	f.Add([]byte{0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, h, err := decodeHelloReply(b)
		if err != nil {
			return
		}
		r := HelloReply{Status: s, Hello: h}
		out, err := r.AppendBARE(nil)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", r, err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("not canonical: %x -> %x", b, out)
		}
	})
}

func FuzzDecodeDeadlock(f *testing.F) {
	for _, cycle := range [][]actor.Ref{
		{actor.Virtual("counter", "a"), actor.Virtual("counter", "b")},
		{actor.Spawned("node-1", 7, 2), actor.Virtual("bank", "acct/1")},
		{},
	} {
		b, err := appendDeadlock(nil, &actor.DeadlockError{Cycle: cycle})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeDeadlock(b)
		if err != nil {
			return
		}
		if len(e.Cycle) > actor.MaxCallChain+1 {
			t.Fatalf("a cycle of %d decoded, over the limit", len(e.Cycle))
		}
		// What decodes encodes again and decodes to the same cycle.
		out, err := appendDeadlock(nil, e)
		if err != nil {
			t.Fatalf("re-encode %v: %v", e.Cycle, err)
		}
		again, err := decodeDeadlock(out)
		if err != nil {
			t.Fatalf("decode of the re-encoding %x: %v", out, err)
		}
		if !slices.Equal(again.Cycle, e.Cycle) {
			t.Fatalf("round trip: %v -> %v", e.Cycle, again.Cycle)
		}
	})
}
