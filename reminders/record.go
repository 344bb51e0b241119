package reminders

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/wire/bare"
)

// RecordKind is the kind under which a shard's reminders are kept in the
// state store, beside the state at rest of the shard's identities, so
// they move, and are replicated, with the shard. No user kind may take
// it. A shard's reminders are one record per reminder (ReminderID: the
// shard's name, "/" and a digest of the reminder's identity and name)
// and one record of delivered progress (RecordID: the shard's name). A
// registration writes its reminder's record only, whatever the shard
// holds; loading a shard reads its records with one prefix scan
// (prospero.PrefixScanner).
const RecordKind = "tempest.reminders"

// RecordID is the store identity of shard's progress record.
func RecordID(shard string) prospero.Identity {
	return prospero.Identity{Kind: RecordKind, Key: shard}
}

// digestHex is the length of the digest that ends a reminder record's
// key: 128 bits of SHA-256 in hex, so that the key has a fixed length
// whatever the identity's (keys may be 4 KiB) and two reminders never
// share a record in practice.
const digestHex = 32

// ReminderID is the store identity of the record of reminder k of
// shard.
func ReminderID(shard string, k Key) prospero.Identity {
	h := sha256.New()
	h.Write([]byte(k.ID.Kind))
	h.Write([]byte{0})
	h.Write([]byte(k.ID.Key))
	h.Write([]byte{0})
	h.Write([]byte(k.Name))
	var sum [sha256.Size]byte
	return prospero.Identity{Kind: RecordKind, Key: RecordPrefix(shard) + hex.EncodeToString(h.Sum(sum[:0])[:digestHex/2])}
}

// RecordPrefix begins the key of every reminder record of shard (not
// its progress record, RecordID).
func RecordPrefix(shard string) string { return shard + "/" }

// legacyBucketID is the store identity of definition record b of shard
// in the format of an earlier version (64 buckets per shard), read only
// to migrate it.
func legacyBucketID(shard string, b int) prospero.Identity {
	return prospero.Identity{Kind: RecordKind, Key: RecordPrefix(shard) + strconv.Itoa(b)}
}

// isLegacyBucket reports whether the part of a reminder record's key
// after RecordPrefix names an earlier version's bucket (a number).
func isLegacyBucket(suffix string) bool {
	if len(suffix) == 0 || len(suffix) > 2 {
		return false
	}
	_, err := strconv.Atoi(suffix)
	return err == nil
}

func isDigest(suffix string) bool {
	if len(suffix) != digestHex {
		return false
	}
	_, err := hex.DecodeString(suffix)
	return err == nil
}

// ShardOfRecord returns the shard whose reminder record key is (the Key
// of RecordID or ReminderID).
func ShardOfRecord(key string) string {
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		if suffix := key[i+1:]; isDigest(suffix) || isLegacyBucket(suffix) {
			return key[:i]
		}
	}
	return key
}

// Records returns every record of shard's reminders in store: its
// progress record, if any, then one per reminder in key order. A handoff
// ships them with the shard's state.
func Records(ctx context.Context, store prospero.PrefixScanner, shard string) ([]prospero.Keyed, error) {
	var out []prospero.Keyed
	head, err := store.Get(ctx, RecordID(shard))
	switch {
	case errors.Is(err, prospero.ErrNotFound):
	case err != nil:
		return nil, err
	default:
		out = append(out, prospero.Keyed{Key: shard, Record: head})
	}
	recs, err := store.ScanPrefix(ctx, RecordKind, RecordPrefix(shard))
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if ShardOfRecord(r.Key) == shard { // not a shard whose name extends this one's with "/"
			out = append(out, r)
		}
	}
	return out, nil
}

const (
	recordV1 = 1 // one record per shard: every reminder with its progress
	recordV2 = 2 // buckets of definitions and a progress record
	recordV3 = 3 // a record per reminder (the progress record is still format 2)
)

// encodeReminder writes the record of one reminder in BARE:
//
//	record = u8 3, kind str, key str, name str, first i64 (unix ns), period i64 (ns),
//	         catchup u8, maxCatchup uint, payloadType str, payload data, gen u64
//
// None of it changes for the life of an entry (a re-registration is a
// new entry): delivered progress is in the shard's progress record.
func encodeReminder(e *entry) []byte {
	b := make([]byte, 0, 40+len(e.ID.Kind)+len(e.ID.Key)+len(e.Name)+len(e.ptype)+len(e.pdata))
	return appendFixed(bare.AppendU8(b, recordV3), e)
}

// decodeReminder reads a record written by encodeReminder.
func decodeReminder(shard string, b []byte) (*entry, error) {
	d := bare.NewDecoder(b, bare.Config{MaxMessageBytes: len(b) + 1})
	if v := d.U8(); d.Err() == nil && v != recordV3 {
		return nil, fmt.Errorf("reminders: shard %s: reminder record version %d", shard, v)
	}
	e := decodeFixed(d, shard)
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("reminders: shard %s: %w", shard, err)
	}
	if err := checkEntry(shard, e); err != nil {
		return nil, err
	}
	return e, nil
}

// encodeBucket writes the definitions es of one bucket in an earlier
// version's format (tests write it to check the migration):
//
//	bucket = u8 2, list of reminder
//	reminder = the fields of encodeReminder after its version
func encodeBucket(es []*entry) []byte {
	b := bare.AppendU8(nil, recordV2)
	b = bare.AppendUint(b, uint64(len(es)))
	for _, e := range es {
		b = appendFixed(b, e)
	}
	return b
}

// appendFixed appends the fields of e that never change.
func appendFixed(b []byte, e *entry) []byte {
	b = bare.AppendString(b, e.ID.Kind)
	b = bare.AppendString(b, e.ID.Key)
	b = bare.AppendString(b, e.Name)
	b = bare.AppendI64(b, e.first.UnixNano())
	b = bare.AppendI64(b, int64(e.per))
	b = bare.AppendU8(b, uint8(e.pol))
	b = bare.AppendUint(b, uint64(e.maxN))
	b = bare.AppendString(b, e.ptype)
	b = bare.AppendData(b, e.pdata)
	return bare.AppendU64(b, e.gen)
}

func decodeFixed(d *bare.Decoder, shard string) *entry {
	e := &entry{shard: shard, idx: -1}
	e.ID = prospero.Identity{Kind: d.Str(), Key: d.Str()}
	e.Name = d.Str()
	e.first = time.Unix(0, d.I64())
	e.per = time.Duration(d.I64())
	e.pol = Catchup(d.U8())
	if n := d.Uint(); n <= DefaultMaxCatchup {
		e.maxN = int(n)
	} else {
		e.maxN = -1 // refused by checkEntry, and no overflow on a 32-bit int
	}
	e.ptype = d.Str()
	e.pdata = d.Data(nil)
	e.gen = d.U64()
	return e
}

// ErrBadRecord: a stored reminder record decodes to a reminder that
// registration would have refused (a negative period, an unknown
// catch-up policy, a catch-up bound out of range, a bad name): the
// record was damaged or written by something else.
var ErrBadRecord = errors.New("reminders: bad reminder record")

// checkEntry refuses what validate would have refused at registration,
// so that a damaged record cannot schedule what no caller could.
func checkEntry(shard string, e *entry) error {
	var why string
	switch {
	case e.Name == "" || len(e.Name) > MaxNameBytes || !utf8.ValidString(e.Name):
		why = "bad name"
	case e.ID.Validate() != nil:
		why = "bad identity"
	case e.per < 0:
		why = fmt.Sprintf("negative period %v", e.per)
	case e.pol > FireUpTo:
		why = fmt.Sprintf("unknown catch-up policy %d", e.pol)
	case e.pol == FireUpTo && (e.maxN < 1 || e.maxN > DefaultMaxCatchup):
		why = fmt.Sprintf("fire-up-to bound %d out of 1..%d", e.maxN, DefaultMaxCatchup)
	case e.pol != FireUpTo && e.maxN != 0:
		why = fmt.Sprintf("catch-up bound %d for %v", e.maxN, e.pol)
	default:
		return nil
	}
	return fmt.Errorf("%w: shard %s: %s %q: %s", ErrBadRecord, shard, e.ID, e.Name, why)
}

// decodeBucket reads a record written by encodeBucket.
func decodeBucket(shard string, b []byte) ([]*entry, error) {
	d := bare.NewDecoder(b, bare.Config{MaxMessageBytes: len(b) + 1})
	if v := d.U8(); d.Err() == nil && v != recordV2 {
		return nil, fmt.Errorf("reminders: shard %s: bucket record version %d", shard, v)
	}
	n := d.Count(30)
	es := make([]*entry, 0, n)
	for range n {
		e := decodeFixed(d, shard)
		if d.Err() == nil {
			if err := checkEntry(shard, e); err != nil {
				return nil, err
			}
		}
		es = append(es, e)
	}
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("reminders: shard %s: %w", shard, err)
	}
	return es, nil
}

// progress is a shard's delivered progress as of At: every reminder of
// the shard registered by then (generation at most MaxGen) had
// delivered, at At, the newest occurrence due by At (entry.lastDue),
// except those listed in Behind with the sequence number they had
// delivered. A reminder registered later (generation above MaxGen) had
// delivered nothing. Punctual reminders, the common case, thus cost
// nothing in the record.
type progress struct {
	At     time.Time
	MaxGen uint64
	Behind map[Key]gseq
}

type gseq struct{ gen, fired uint64 }

// firedOf is what p says e had delivered.
func (p *progress) firedOf(e *entry) uint64 {
	if p == nil || e.gen > p.MaxGen {
		return 0
	}
	if g, ok := p.Behind[e.Key]; ok && g.gen == e.gen {
		return g.fired
	}
	return e.lastDue(p.At)
}

// encodeProgress writes the progress record of the entries es at now:
//
//	progress = u8 2, at i64 (unix ns), maxGen u64, list of behind
//	behind = kind str, key str, name str, gen u64, fired uint
func encodeProgress(now time.Time, maxGen uint64, es func(yield func(*entry) bool)) []byte {
	b := bare.AppendU8(nil, recordV2)
	b = bare.AppendI64(b, now.UnixNano())
	b = bare.AppendU64(b, maxGen)
	var behind []*entry
	for e := range es {
		if e.fired != e.lastDue(now) {
			behind = append(behind, e)
		}
	}
	b = bare.AppendUint(b, uint64(len(behind)))
	for _, e := range behind {
		b = bare.AppendString(b, e.ID.Kind)
		b = bare.AppendString(b, e.ID.Key)
		b = bare.AppendString(b, e.Name)
		b = bare.AppendU64(b, e.gen)
		b = bare.AppendUint(b, e.fired)
	}
	return b
}

// decodeShardRecord reads a shard's progress record: a progress (format
// 2), or the entries of a record of format 1, which held every reminder
// with its progress (a store written by an older version).
func decodeShardRecord(shard string, b []byte) (*progress, []*entry, error) {
	d := bare.NewDecoder(b, bare.Config{MaxMessageBytes: len(b) + 1})
	v := d.U8()
	switch {
	case d.Err() != nil:
	case v == recordV1:
		n := d.Count(30)
		es := make([]*entry, 0, n)
		for range n {
			e := decodeFixed(d, shard)
			e.fired = d.Uint()
			if d.Err() == nil {
				if err := checkEntry(shard, e); err != nil {
					return nil, nil, err
				}
			}
			es = append(es, e)
		}
		if err := d.Finish(); err != nil {
			return nil, nil, fmt.Errorf("reminders: shard %s: %w", shard, err)
		}
		return nil, es, nil
	case v != recordV2:
		return nil, nil, fmt.Errorf("reminders: shard %s: record version %d", shard, v)
	}
	p := &progress{At: time.Unix(0, d.I64()), MaxGen: d.U64(), Behind: map[Key]gseq{}}
	n := d.Count(5)
	for range n {
		k := Key{ID: prospero.Identity{Kind: d.Str(), Key: d.Str()}, Name: d.Str()}
		p.Behind[k] = gseq{gen: d.U64(), fired: d.Uint()}
	}
	if err := d.Finish(); err != nil {
		return nil, nil, fmt.Errorf("reminders: shard %s: %w", shard, err)
	}
	return p, nil, nil
}
