package replica

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/wire/bare"
)

// Shard names one shard of one placement group (placement.ShardRef,
// without the import).
type Shard struct {
	Group string
	Index int
}

func (s Shard) String() string {
	if s.Group == "" {
		return fmt.Sprintf("shard %d", s.Index)
	}
	return fmt.Sprintf("shard %s/%d", s.Group, s.Index)
}

// Record is one committed record on its way from a shard's owner to a
// replica.
type Record struct {
	Shard Shard
	prospero.Replicated
}

// Frame kinds.
const (
	frameBatch = 1 // owner → replica: records
	frameAck   = 2 // replica → owner: the batch's outcome
	frameList  = 3 // owner → replica: list what you hold of these shards
	frameHeld  = 4 // replica → owner: part of that list
	// frameAckLost is an ack refusing the batch because records this
	// replica acknowledged to the same owner before were not stored (a
	// background write failed): the owner must take it out of every
	// set it shares with it, not only those of the batch. An owner that
	// does not know the kind fails the round trip, which takes the
	// replica out of the batch's sets, as before.
	frameAckLost = 5
)

// ErrLostRecords: a replica refused a batch because records it
// acknowledged to this owner earlier were not stored.
var ErrLostRecords = errors.New("replica: records acknowledged earlier were not stored")

// lostRecords is a replica's ErrLostRecords refusal as its owner reads
// it: the replica's text, which names the sentinel already.
type lostRecords string

func (e lostRecords) Error() string        { return string(e) }
func (e lostRecords) Is(target error) bool { return target == ErrLostRecords }

// Batch flags.
const (
	flagSync = 1 << 0 // the owner waits for the replica's fsync
)

// maxFrame bounds one frame, encoded and decoded.
const maxFrame = 8 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrBadRecord: a replication frame or record failed its checksum or did
// not decode. It is never applied. *StreamError says from which node
// and, where known, of which shard.
var ErrBadRecord = errors.New("replica: bad record")

// ErrStale: a record of an epoch older than this replica has seen for
// its shard, or from a node that does not own the shard at that epoch.
var ErrStale = errors.New("replica: stale record")

// StreamError is a replication stream failure naming the peer and, when
// it is known, the shard.
type StreamError struct {
	Node  string
	Shard *Shard
	Err   error
}

func (e *StreamError) Error() string {
	if e.Shard != nil {
		return fmt.Sprintf("replica: stream from %s, %s: %v", e.Node, e.Shard, e.Err)
	}
	return fmt.Sprintf("replica: stream from %s: %v", e.Node, e.Err)
}

func (e *StreamError) Unwrap() error { return e.Err }

// appendRecord encodes r as a BARE struct followed by the CRC-32C of its
// bytes (u32):
//
//	{group: str, index: uint, epoch: uint, version: uint, incarnation: uint,
//	 deleted: bool, deletesEpoch: uint, kind: str, key: str, state: data} crc: u32
//
// deletesEpoch is the epoch of the copy a deletion removes (0 in a
// record that is not a deletion; never above epoch).
func appendRecord(dst []byte, r *Record) []byte {
	start := len(dst)
	dst = bare.AppendString(dst, r.Shard.Group)
	dst = bare.AppendUint(dst, uint64(r.Shard.Index))
	dst = bare.AppendUint(dst, r.Epoch)
	dst = bare.AppendUint(dst, r.Version)
	dst = bare.AppendUint(dst, r.Incarnation)
	dst = bare.AppendBool(dst, r.Deleted)
	dst = bare.AppendUint(dst, r.DeletesEpoch)
	dst = bare.AppendString(dst, r.ID.Kind)
	dst = bare.AppendString(dst, r.ID.Key)
	dst = bare.AppendData(dst, r.State)
	return bare.AppendU32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// appendBatch encodes a batch frame body: kind, seq, flags, count, records.
func appendBatch(dst []byte, seq uint64, flags uint8, recs []*Record) []byte {
	dst = bare.AppendU8(dst, frameBatch)
	dst = bare.AppendUint(dst, seq)
	dst = bare.AppendU8(dst, flags)
	dst = bare.AppendUint(dst, uint64(len(recs)))
	for _, r := range recs {
		dst = appendRecord(dst, r)
	}
	return dst
}

// decodeBatch decodes a batch frame body. On a bad record it returns the
// shard of that record when its header decoded.
func decodeBatch(b []byte) (seq uint64, flags uint8, recs []Record, shard *Shard, err error) {
	d := bare.NewDecoder(b, bare.Config{MaxMessageBytes: maxFrame})
	if k := d.U8(); d.Err() == nil && k != frameBatch {
		return 0, 0, nil, nil, fmt.Errorf("%w: frame kind %d", ErrBadRecord, k)
	}
	seq = d.Uint()
	flags = d.U8()
	n := d.Count(1)
	if err := d.Err(); err != nil {
		return 0, 0, nil, nil, fmt.Errorf("%w: batch header: %v", ErrBadRecord, err)
	}
	recs = make([]Record, 0, n)
	for range n {
		start := d.Offset()
		var r Record
		r.Shard.Group = d.Str()
		idx := d.Uint()
		r.Shard.Index = int(idx)
		if d.Err() == nil && idx > 1<<31 {
			return 0, 0, nil, nil, fmt.Errorf("%w: shard index %d", ErrBadRecord, idx)
		}
		sh := r.Shard
		r.Epoch = d.Uint()
		r.Version = d.Uint()
		r.Incarnation = d.Uint()
		r.Deleted = d.Bool()
		r.DeletesEpoch = d.Uint()
		r.ID.Kind = d.Str()
		r.ID.Key = d.Str()
		r.State = d.Data(nil)
		end := d.Offset()
		sum := d.U32()
		if err := d.Err(); err != nil {
			if end > start+1 {
				shard = &sh
			}
			return 0, 0, nil, shard, fmt.Errorf("%w: %v", ErrBadRecord, err)
		}
		if got := crc32.Checksum(b[start:end], castagnoli); got != sum {
			return 0, 0, nil, &sh, fmt.Errorf("%w: checksum %08x, record says %08x", ErrBadRecord, got, sum)
		}
		if err := r.ID.Validate(); err != nil {
			return 0, 0, nil, &sh, fmt.Errorf("%w: %v", ErrBadRecord, err)
		}
		switch {
		case !r.Deleted && r.DeletesEpoch != 0:
			return 0, 0, nil, &sh, fmt.Errorf("%w: %s: a write names a deleted copy's epoch", ErrBadRecord, r.ID)
		case r.DeletesEpoch > r.Epoch:
			return 0, 0, nil, &sh, fmt.Errorf("%w: %s: deletion of a copy of epoch %d sent under epoch %d", ErrBadRecord, r.ID, r.DeletesEpoch, r.Epoch)
		}
		if len(r.State) == 0 {
			r.State = nil
		}
		recs = append(recs, r)
	}
	if err := d.Finish(); err != nil {
		return 0, 0, nil, nil, fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	return seq, flags, recs, nil, nil
}

// appendAck encodes an ack frame body: kind, seq, error text ("" = ok).
func appendAck(dst []byte, seq uint64, err error) []byte {
	kind := uint8(frameAck)
	if errors.Is(err, ErrLostRecords) {
		kind = frameAckLost
	}
	dst = bare.AppendU8(dst, kind)
	dst = bare.AppendUint(dst, seq)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	return bare.AppendString(dst, msg)
}

// decodeAck decodes an ack: the batch's seq and, when the replica
// refused it, why (an error wrapping ErrLostRecords for frameAckLost).
func decodeAck(b []byte) (uint64, error, error) {
	d := bare.NewDecoder(b, bare.Config{MaxMessageBytes: maxFrame})
	k := d.U8()
	if d.Err() == nil && k != frameAck && k != frameAckLost {
		return 0, nil, fmt.Errorf("%w: frame kind %d", ErrBadRecord, k)
	}
	seq := d.Uint()
	msg := d.Str()
	if err := d.Finish(); err != nil {
		return 0, nil, fmt.Errorf("%w: ack: %v", ErrBadRecord, err)
	}
	switch {
	case k == frameAckLost:
		return seq, lostRecords(msg), nil
	case msg != "":
		return seq, errors.New(msg), nil
	}
	return seq, nil, nil
}

// EncodeBatch returns recs as one frame of the replication stream, as an
// owner's sender writes it (length prefix included): for tools and for
// tests that feed a replica by hand.
func EncodeBatch(seq uint64, syncReplicas bool, recs []*Record) []byte {
	var flags uint8
	if syncReplicas {
		flags |= flagSync
	}
	b := appendBatch([]byte{0, 0, 0, 0}, seq, flags, recs)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// ReadAck reads the replica's answer to one frame: nil, or the error the
// replica refused it with.
func ReadAck(r io.Reader) error {
	b, err := readFrame(bufio.NewReader(r))
	if err != nil {
		return err
	}
	_, refused, err := decodeAck(b)
	if err != nil {
		return err
	}
	return refused
}

// Held is one record a replica holds, as it lists it for a catch-up.
type Held struct {
	Shard          Shard
	ID             prospero.Identity
	Epoch, Version uint64
}

// appendList encodes a list request: kind, count, shards {group, index}.
func appendList(dst []byte, shards []Shard) []byte {
	dst = bare.AppendU8(dst, frameList)
	dst = bare.AppendUint(dst, uint64(len(shards)))
	for _, sh := range shards {
		dst = bare.AppendString(dst, sh.Group)
		dst = bare.AppendUint(dst, uint64(sh.Index))
	}
	return dst
}

func decodeList(b []byte) ([]Shard, error) {
	d := bare.NewDecoder(b, bare.Config{MaxMessageBytes: maxFrame})
	if k := d.U8(); d.Err() == nil && k != frameList {
		return nil, fmt.Errorf("%w: frame kind %d", ErrBadRecord, k)
	}
	n := d.Count(2)
	var out []Shard
	for range n {
		g := d.Str()
		idx := d.Uint()
		if d.Err() == nil && idx > 1<<31 {
			return nil, fmt.Errorf("%w: shard index %d", ErrBadRecord, idx)
		}
		out = append(out, Shard{Group: g, Index: int(idx)})
	}
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("%w: list: %v", ErrBadRecord, err)
	}
	return out, nil
}

// appendHeld encodes one part of a replica's list: kind, error text ("":
// ok), last (the list ends here), count, entries {group, index, kind,
// key, epoch, version}.
func appendHeld(dst []byte, err error, last bool, hs []Held) []byte {
	dst = bare.AppendU8(dst, frameHeld)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	dst = bare.AppendString(dst, msg)
	dst = bare.AppendBool(dst, last)
	dst = bare.AppendUint(dst, uint64(len(hs)))
	for _, h := range hs {
		dst = bare.AppendString(dst, h.Shard.Group)
		dst = bare.AppendUint(dst, uint64(h.Shard.Index))
		dst = bare.AppendString(dst, h.ID.Kind)
		dst = bare.AppendString(dst, h.ID.Key)
		dst = bare.AppendUint(dst, h.Epoch)
		dst = bare.AppendUint(dst, h.Version)
	}
	return dst
}

func decodeHeld(b []byte) (hs []Held, last bool, msg string, err error) {
	d := bare.NewDecoder(b, bare.Config{MaxMessageBytes: maxFrame})
	if k := d.U8(); d.Err() == nil && k != frameHeld {
		return nil, false, "", fmt.Errorf("%w: frame kind %d", ErrBadRecord, k)
	}
	msg = d.Str()
	last = d.Bool()
	n := d.Count(6)
	for range n {
		var h Held
		h.Shard.Group = d.Str()
		idx := d.Uint()
		if d.Err() == nil && idx > 1<<31 {
			return nil, false, "", fmt.Errorf("%w: shard index %d", ErrBadRecord, idx)
		}
		h.Shard.Index = int(idx)
		h.ID.Kind = d.Str()
		h.ID.Key = d.Str()
		h.Epoch = d.Uint()
		h.Version = d.Uint()
		if d.Err() == nil {
			if err := h.ID.Validate(); err != nil {
				return nil, false, "", fmt.Errorf("%w: %v", ErrBadRecord, err)
			}
		}
		hs = append(hs, h)
	}
	if err := d.Finish(); err != nil {
		return nil, false, "", fmt.Errorf("%w: held: %v", ErrBadRecord, err)
	}
	return hs, last, msg, nil
}
