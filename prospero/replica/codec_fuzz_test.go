package replica

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/tempest-actors/tempest/prospero"
)

// FuzzDecodeBatch feeds arbitrary frame bodies to the replica's decoder,
// as a peer could: it never panics, refuses what it cannot take with
// ErrBadRecord, and what it takes encodes back to a body that decodes
// to the same records.
func FuzzDecodeBatch(f *testing.F) {
	rec := &Record{Shard: Shard{Group: "g", Index: 3}, Replicated: prospero.Replicated{
		ID: prospero.Identity{Kind: "counter", Key: "k"}, Version: 7, Incarnation: 2, State: []byte("state")}}
	rec.Epoch = 5
	f.Add(appendBatch(nil, 1, 0, []*Record{rec}))
	f.Add(appendBatch(nil, 2, flagSync, []*Record{rec, {Shard: Shard{Index: 0}, Replicated: prospero.Replicated{
		ID: prospero.Identity{Kind: "k", Key: "x"}, Deleted: true}}}))
	f.Add(appendBatch(nil, 4, 0, []*Record{{Shard: Shard{Index: 1}, Replicated: prospero.Replicated{
		ID: prospero.Identity{Kind: "k", Key: "y"}, Epoch: 6, Version: 9, Deleted: true, DeletesEpoch: 4}}}))
	f.Add(appendBatch(nil, 3, 0, nil))
	f.Add([]byte{frameBatch, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, flags, recs, _, err := decodeBatch(b)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("refusal %v is not ErrBadRecord", err)
			}
			return
		}
		ptrs := make([]*Record, len(recs))
		for i := range recs {
			ptrs[i] = &recs[i]
		}
		seq2, flags2, recs2, _, err := decodeBatch(appendBatch(nil, seq, flags, ptrs))
		if err != nil || seq2 != seq || flags2 != flags || !reflect.DeepEqual(recs2, recs) {
			t.Fatalf("round trip: %d %d %+v, %v; want %d %d %+v", seq2, flags2, recs2, err, seq, flags, recs)
		}
	})
}

// FuzzDecodeAck: an owner reads acknowledgements from its replicas; any
// input is an ack or ErrBadRecord, never a panic.
func FuzzDecodeAck(f *testing.F) {
	f.Add(appendAck(nil, 9, nil))
	f.Add(appendAck(nil, 10, errors.New("disk full")))
	f.Add(appendAck(nil, 11, fmt.Errorf("%w: disk full", ErrLostRecords)))
	f.Add([]byte{frameAck})
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, refused, err := decodeAck(b)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("refusal %v is not ErrBadRecord", err)
			}
			return
		}
		seq2, refused2, err := decodeAck(appendAck(nil, seq, refused))
		if err != nil || seq2 != seq || (refused == nil) != (refused2 == nil) ||
			errors.Is(refused, ErrLostRecords) != errors.Is(refused2, ErrLostRecords) {
			t.Fatalf("round trip: %d %v %v; want %d %v", seq2, refused2, err, seq, refused)
		}
	})
}

// FuzzDecodeList: a replica reads a catch-up's list request from its
// owner; any input is a list of shards or ErrBadRecord, never a panic.
func FuzzDecodeList(f *testing.F) {
	f.Add(appendList(nil, []Shard{{Group: "g", Index: 3}, {Index: 0}}))
	f.Add(appendList(nil, nil))
	f.Add([]byte{frameList, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		shards, err := decodeList(b)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("refusal %v is not ErrBadRecord", err)
			}
			return
		}
		if got, err := decodeList(appendList(nil, shards)); err != nil || !reflect.DeepEqual(got, shards) {
			t.Fatalf("round trip: %+v, %v; want %+v", got, err, shards)
		}
	})
}

// FuzzDecodeHeld: an owner reads a replica's list of what it holds; any
// input is a part of the list or ErrBadRecord, never a panic.
func FuzzDecodeHeld(f *testing.F) {
	h := Held{Shard: Shard{Group: "g", Index: 1}, ID: prospero.Identity{Kind: "counter", Key: "k"}, Epoch: 4, Version: 9}
	f.Add(appendHeld(nil, nil, true, []Held{h, h}))
	f.Add(appendHeld(nil, errors.New("disk"), true, nil))
	f.Add(appendHeld(nil, nil, false, []Held{{ID: prospero.Identity{Kind: "", Key: "x"}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		hs, last, msg, err := decodeHeld(b)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("refusal %v is not ErrBadRecord", err)
			}
			return
		}
		var cause error
		if msg != "" {
			cause = errors.New(msg)
		}
		hs2, last2, msg2, err := decodeHeld(appendHeld(nil, cause, last, hs))
		if err != nil || last2 != last || msg2 != msg || !reflect.DeepEqual(hs2, hs) {
			t.Fatalf("round trip: %+v %v %q, %v; want %+v %v %q", hs2, last2, msg2, err, hs, last, msg)
		}
	})
}
