package reminders

import (
	"fmt"
	"time"

	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/wire/bare"
)

// RecordKind is the kind under which a shard's reminders are kept in the
// state store: one record per shard (key: the shard's name), beside the
// state at rest of the shard's identities, so they move, and are
// replicated, with the shard. No user kind may take it.
const RecordKind = "tempest.reminders"

// RecordID is the store identity of shard's reminder record.
func RecordID(shard string) prospero.Identity {
	return prospero.Identity{Kind: RecordKind, Key: shard}
}

const recordVersion = 1

// encodeShard writes the reminders es of one shard in BARE:
//
//	record = u8 version, list of reminder
//	reminder = kind str, key str, name str, first i64 (unix ns), period i64 (ns),
//	           catchup u8, maxCatchup uint, payloadType str, payload data,
//	           gen u64, fired uint
func encodeShard(es []*entry) []byte {
	b := bare.AppendU8(nil, recordVersion)
	b = bare.AppendUint(b, uint64(len(es)))
	for _, e := range es {
		b = bare.AppendString(b, e.ID.Kind)
		b = bare.AppendString(b, e.ID.Key)
		b = bare.AppendString(b, e.Name)
		b = bare.AppendI64(b, e.first.UnixNano())
		b = bare.AppendI64(b, int64(e.per))
		b = bare.AppendU8(b, uint8(e.pol))
		b = bare.AppendUint(b, uint64(e.maxN))
		b = bare.AppendString(b, e.ptype)
		b = bare.AppendData(b, e.pdata)
		b = bare.AppendU64(b, e.gen)
		b = bare.AppendUint(b, e.fired)
	}
	return b
}

// decodeShard reads a record written by encodeShard.
func decodeShard(shard string, b []byte) ([]*entry, error) {
	d := bare.NewDecoder(b, bare.Config{MaxMessageBytes: len(b) + 1})
	if v := d.U8(); d.Err() == nil && v != recordVersion {
		return nil, fmt.Errorf("reminders: shard %s: record version %d", shard, v)
	}
	n := d.Count(30)
	es := make([]*entry, 0, n)
	for range n {
		e := &entry{shard: shard, idx: -1}
		e.ID = prospero.Identity{Kind: d.Str(), Key: d.Str()}
		e.Name = d.Str()
		e.first = time.Unix(0, d.I64())
		e.per = time.Duration(d.I64())
		e.pol = Catchup(d.U8())
		e.maxN = int(d.Uint())
		e.ptype = d.Str()
		e.pdata = d.Data(nil)
		e.gen = d.U64()
		e.fired = d.Uint()
		if d.Err() == nil && (e.per < 0 || e.pol > FireUpTo) {
			return nil, fmt.Errorf("reminders: shard %s: bad reminder %s %q", shard, e.ID, e.Name)
		}
		es = append(es, e)
	}
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("reminders: shard %s: %w", shard, err)
	}
	return es, nil
}
