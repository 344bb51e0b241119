package reminders

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/wire/bare"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newEntry(name string, per time.Duration, pol Catchup, maxN int) *entry {
	return &entry{Key: Key{ID: prospero.Identity{Kind: "acct", Key: "1"}, Name: name}, shard: "s",
		first: t0.Add(time.Second), per: per, pol: pol, maxN: maxN, gen: 1, idx: -1}
}

// deliverAll runs the schedule at now, delivering every tick at once,
// until nothing more is due; it returns the sequence numbers delivered.
func deliverAll(s *Schedule, now time.Time) []uint64 {
	var seqs []uint64
	for {
		fs := s.Due(now, nil)
		if len(fs) == 0 {
			return seqs
		}
		for _, f := range fs {
			if ok, _ := s.Delivered(f, now); !ok {
				panic("a dispatched tick was refused")
			}
			seqs = append(seqs, f.Seq)
		}
	}
}

func TestScheduleFiresOnScheduleWithSequenceNumbers(t *testing.T) {
	s := NewSchedule(time.Minute)
	s.put(newEntry("r", time.Second, FireOnce, 0))
	if fs := s.Due(t0.Add(999*time.Millisecond), nil); len(fs) != 0 {
		t.Fatalf("fired before due: %v", fs)
	}
	var got []uint64
	for i := 1; i <= 3; i++ {
		now := t0.Add(time.Duration(i) * time.Second)
		fs := s.Due(now, nil)
		if len(fs) != 1 || fs[0].Seq != uint64(i) || !fs[0].Scheduled.Equal(now) || fs[0].Late != 0 {
			t.Fatalf("at %v: %+v", now, fs)
		}
		s.Delivered(fs[0], now)
		got = append(got, fs[0].Seq)
	}
	if c := s.Counts(); c.Fired != 3 || c.Skipped != 0 || c.Failed != 0 {
		t.Fatalf("counts %+v", c)
	}
}

// Each catch-up policy after an outage of 10 periods (occurrences 1..11
// are due when the schedule runs again at t0+11s).
func TestScheduleCatchupPolicies(t *testing.T) {
	for _, tc := range []struct {
		pol     Catchup
		maxN    int
		want    []uint64
		skipped uint64
	}{
		{Skip, 0, nil, 11},
		{FireOnce, 0, []uint64{11}, 10},
		{FireUpTo, 3, []uint64{9, 10, 11}, 8},
		{FireUpTo, 20, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 0},
	} {
		t.Run(tc.pol.String(), func(t *testing.T) {
			s := NewSchedule(time.Minute)
			s.put(newEntry("r", time.Second, tc.pol, tc.maxN))
			now := t0.Add(11*time.Second + 500*time.Millisecond)
			got := deliverAll(s, now)
			if len(got) != len(tc.want) {
				t.Fatalf("delivered %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("delivered %v, want %v", got, tc.want)
				}
			}
			if c := s.Counts(); c.Skipped != tc.skipped {
				t.Fatalf("skipped %d, want %d", c.Skipped, tc.skipped)
			}
			// Back on schedule: the next tick is occurrence 12 at t0+12s.
			if next, _ := s.Next(); !next.Equal(t0.Add(12 * time.Second)) {
				t.Fatalf("next due %v, want %v", next, t0.Add(12*time.Second))
			}
		})
	}
}

// At most one tick in flight: while it is undelivered nothing more
// fires; an undelivered flight counts as failed at its deadline and the
// reminder fires again.
func TestScheduleOneOutstandingTick(t *testing.T) {
	s := NewSchedule(5 * time.Second)
	s.put(newEntry("r", time.Second, FireOnce, 0))
	first := s.Due(t0.Add(time.Second), nil)
	if len(first) != 1 {
		t.Fatalf("fired %v", first)
	}
	for ms := 1100; ms < 6000; ms += 100 {
		if fs := s.Due(t0.Add(time.Duration(ms)*time.Millisecond), nil); len(fs) != 0 {
			t.Fatalf("a second tick fired while one was in flight: %v", fs)
		}
	}
	again := s.Due(t0.Add(6*time.Second), nil)
	if len(again) != 1 || again[0].Seq != 6 {
		t.Fatalf("after the flight's deadline: %+v, want seq 6 (fire-once catch-up)", again)
	}
	if c := s.Counts(); c.Failed != 1 {
		t.Fatalf("failed %d, want 1", c.Failed)
	}
	// The stale flight's delivery is refused.
	if ok, _ := s.Delivered(first[0], t0.Add(6*time.Second)); ok {
		t.Fatal("a superseded tick was accepted")
	}
}

// A tick dispatched before the reminder was removed or re-registered is
// refused at delivery.
func TestScheduleRefusesStaleTicks(t *testing.T) {
	s := NewSchedule(time.Minute)
	s.put(newEntry("r", time.Second, FireOnce, 0))
	f := s.Due(t0.Add(time.Second), nil)[0]
	s.remove(f.Key)
	if ok, _ := s.Delivered(f, t0.Add(time.Second)); ok {
		t.Fatal("tick of a removed reminder accepted")
	}
	e := newEntry("r", time.Second, FireOnce, 0)
	s.put(e)
	f = s.Due(t0.Add(time.Second), nil)[0]
	e2 := newEntry("r", time.Second, FireOnce, 0)
	e2.gen = 2
	s.put(e2)
	if ok, _ := s.Delivered(f, t0.Add(time.Second)); ok {
		t.Fatal("tick of a replaced registration accepted")
	}
}

func TestScheduleOneShotIsRemovedOnDelivery(t *testing.T) {
	s := NewSchedule(time.Minute)
	s.put(newEntry("once", 0, FireOnce, 0))
	// Late by an hour: a one-shot has nothing to miss, it fires.
	fs := s.Due(t0.Add(time.Hour), nil)
	if len(fs) != 1 || fs[0].Seq != 1 {
		t.Fatalf("fired %+v", fs)
	}
	if ok, removed := s.Delivered(fs[0], t0.Add(time.Hour)); !ok || !removed {
		t.Fatalf("Delivered = %v, %v", ok, removed)
	}
	if s.Len() != 0 {
		t.Fatal("one-shot kept after delivery")
	}
}

func TestRecordRoundTrip(t *testing.T) {
	a := newEntry("a", time.Second, FireUpTo, 3)
	a.ptype, a.pdata = "acct.Bill", []byte{1, 2, 3}
	got, err := decodeReminder("s", encodeReminder(a))
	if err != nil {
		t.Fatal(err)
	}
	if got.Key != a.Key || !got.first.Equal(a.first) || got.per != a.per || got.pol != a.pol || got.maxN != 3 ||
		got.ptype != a.ptype || string(got.pdata) != string(a.pdata) || got.gen != a.gen || got.shard != "s" {
		t.Fatalf("round trip: %+v", got)
	}
	rec := encodeReminder(a)
	if _, err := decodeReminder("s", rec[:len(rec)-1]); err == nil {
		t.Fatal("truncated record accepted")
	}
	if _, err := decodeReminder("s", append([]byte{2}, rec[1:]...)); err == nil {
		t.Fatal("a record of another version accepted")
	}
	// The buckets of the previous format still decode (for migration).
	b := newEntry("b", 0, Skip, 0)
	bs, err := decodeBucket("s", encodeBucket([]*entry{a, b}))
	if err != nil || len(bs) != 2 || bs[0].Key != a.Key || bs[1].Name != "b" {
		t.Fatalf("bucket round trip: %v %v", bs, err)
	}
}

// A stored record is checked as registration would check the reminder:
// what no caller could register is refused with ErrBadRecord, not
// scheduled.
func TestDecodeRefusesWhatRegistrationWould(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*entry)
	}{
		{"negative period", func(e *entry) { e.per = -time.Second }},
		{"unknown policy", func(e *entry) { e.pol = FireUpTo + 1 }},
		{"fire-up-to bound 0", func(e *entry) { e.pol, e.maxN = FireUpTo, 0 }},
		{"fire-up-to bound over the maximum", func(e *entry) { e.pol, e.maxN = FireUpTo, DefaultMaxCatchup+1 }},
		{"fire-up-to bound beyond an int", func(e *entry) { e.pol, e.maxN = FireUpTo, -1 }},
		{"bound without fire-up-to", func(e *entry) { e.pol, e.maxN = FireOnce, 5 }},
		{"empty name", func(e *entry) { e.Name = "" }},
		{"long name", func(e *entry) { e.Name = string(make([]byte, MaxNameBytes+1)) }},
		{"bad identity", func(e *entry) { e.ID.Kind = "a/b" }},
	} {
		e := newEntry("r", time.Second, FireOnce, 0)
		tc.mod(e)
		rec := encodeReminder(e)
		if tc.name == "fire-up-to bound beyond an int" {
			// maxN as a uint of 2^64-1: what a damaged record may hold.
			e.maxN = 0
			rec = bare.AppendU8(nil, recordV3)
			rec = bare.AppendString(rec, e.ID.Kind)
			rec = bare.AppendString(rec, e.ID.Key)
			rec = bare.AppendString(rec, e.Name)
			rec = bare.AppendI64(rec, e.first.UnixNano())
			rec = bare.AppendI64(rec, int64(e.per))
			rec = bare.AppendU8(rec, uint8(FireUpTo))
			rec = bare.AppendUint(rec, ^uint64(0))
			rec = bare.AppendString(rec, "")
			rec = bare.AppendData(rec, nil)
			rec = bare.AppendU64(rec, 1)
		}
		if _, err := decodeReminder("s", rec); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: %v, want ErrBadRecord", tc.name, err)
		}
		if _, err := decodeBucket("s", encodeBucket([]*entry{e})); tc.name != "fire-up-to bound beyond an int" && !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s in a bucket: %v, want ErrBadRecord", tc.name, err)
		}
	}
}

// The progress record lists only the reminders behind their schedule;
// the others are read back as having delivered the newest occurrence due
// when it was written, and one registered after it as having delivered
// nothing.
func TestProgressRecord(t *testing.T) {
	at := t0.Add(10*time.Second + time.Millisecond)
	punctual := newEntry("punctual", time.Second, FireOnce, 0)
	punctual.gen, punctual.fired = 1, punctual.lastDue(at)
	late := newEntry("late", time.Second, FireOnce, 0)
	late.gen, late.fired = 2, 3
	future := newEntry("future", time.Second, FireOnce, 0)
	future.gen, future.first = 3, at.Add(time.Hour)
	b := encodeProgress(at, 3, slices.Values([]*entry{punctual, late, future}))
	p, old, err := decodeShardRecord("s", b)
	if err != nil || old != nil {
		t.Fatal(err, old)
	}
	if len(p.Behind) != 1 || !p.At.Equal(at) || p.MaxGen != 3 {
		t.Fatalf("progress %+v: want only the late reminder listed", p)
	}
	for _, tc := range []struct {
		e    *entry
		want uint64
	}{{punctual, 10}, {late, 3}, {future, 0}} {
		if got := p.firedOf(tc.e); got != tc.want {
			t.Errorf("%s: fired %d, want %d", tc.e.Name, got, tc.want)
		}
	}
	later := newEntry("later", time.Second, FireOnce, 0)
	later.gen = 4 // registered after the record: due before at, but nothing delivered
	if got := p.firedOf(later); got != 0 {
		t.Errorf("a reminder registered after the record: fired %d, want 0", got)
	}
	regen := newEntry("late", time.Second, FireOnce, 0)
	regen.gen = 5 // "late" registered again: its old progress is not its own
	if got := p.firedOf(regen); got != 0 {
		t.Errorf("a re-registration: fired %d, want 0", got)
	}
	if _, _, err := decodeShardRecord("s", b[:len(b)-1]); err == nil {
		t.Fatal("truncated progress accepted")
	}
}

type nopCodec struct{}

func (nopCodec) Encode(string, any) (string, []byte, error)              { return "", nil, ErrUnknownPayload }
func (nopCodec) Decode(string, string, []byte) (any, error)              { return nil, nil }
func (nopCodec) Deliver(actor.Ref, Tick, func() bool, func(error)) error { return nil }

// reminderRecords returns the reminders in shard s's records of store,
// by key, failing on records of any other form.
func reminderRecords(t *testing.T, store prospero.PrefixScanner) map[Key]*entry {
	t.Helper()
	recs, err := store.ScanPrefix(context.Background(), RecordKind, RecordPrefix("s"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[Key]*entry{}
	for _, r := range recs {
		x, err := decodeReminder("s", r.State)
		if err != nil {
			t.Fatalf("record %s: %v", r.Key, err)
		}
		if ReminderID("s", x.Key).Key != r.Key {
			t.Fatalf("%v stored under %s", x.Key, r.Key)
		}
		out[x.Key] = x
	}
	return out
}

// A shard stored in the one-record format of an earlier version is read
// with its progress and rewritten as a record per reminder and a
// progress record.
func TestOneRecordShardMigrates(t *testing.T) {
	a := newEntry("a", time.Hour, FireOnce, 0)
	a.first, a.fired, a.gen = time.Now().Add(-2*time.Hour-time.Minute), 3, 7
	b := newEntry("b", time.Hour, Skip, 0)
	b.ID.Key, b.first, b.gen = "2", time.Now().Add(time.Hour), 9
	old := bare.AppendU8(nil, recordV1)
	old = bare.AppendUint(old, 2)
	for _, e := range []*entry{a, b} {
		old = appendFixed(old, e)
		old = bare.AppendUint(old, e.fired)
	}
	store := prospero.NewMemStore()
	ctx := context.Background()
	if _, err := store.Put(ctx, RecordID("s"), 0, prospero.Record{State: old}); err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{Store: store, Codec: nopCodec{}, Deliver: nopCodec{}, ShardOf: func(prospero.Identity) string { return "s" }})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Acquire(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*entry{a, b} {
		infos, err := e.ListOf(x.ID)
		if err != nil || len(infos) != 1 || infos[0].Name != x.Name || infos[0].LastSeq != x.fired || !infos[0].Due.Equal(x.first) {
			t.Fatalf("%s after migration: %+v, %v", x.Name, infos, err)
		}
	}
	head, err := store.Get(ctx, RecordID("s"))
	if err != nil {
		t.Fatal(err)
	}
	p, legacy, err := decodeShardRecord("s", head.State)
	if err != nil || legacy != nil || p.MaxGen != 9 {
		t.Fatalf("the shard's record after migration: %+v %v %v", p, legacy, err)
	}
	if got := reminderRecords(t, store); len(got) != 2 || got[a.Key] == nil || got[b.Key] == nil {
		t.Fatalf("records after migration: %v", got)
	}
	// Read back in the new format, a keeps its progress.
	e2, _ := New(Config{Store: store, Codec: nopCodec{}, Deliver: nopCodec{}, ShardOf: func(prospero.Identity) string { return "s" }})
	if err := e2.Acquire(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if infos, _ := e2.ListOf(a.ID); len(infos) != 1 || infos[0].LastSeq != 3 {
		t.Fatalf("a read back: %+v", infos)
	}
	_ = e.Close(ctx)
	_ = e2.Close(ctx)
}

// A shard stored in buckets (the format before a record per reminder)
// is rewritten as a record per reminder, the buckets deleted, the
// progress record kept; a one-shot the progress shows delivered is not
// carried over.
func TestBucketShardMigrates(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	a := newEntry("a", time.Hour, FireOnce, 0)
	a.first, a.gen = now.Add(-2*time.Hour-time.Minute), 1 // behind: fired 1
	b := newEntry("b", time.Minute, Skip, 0)
	b.ID.Key, b.first, b.gen = "2", now.Add(time.Hour), 2
	done := newEntry("done", 0, FireOnce, 0)
	done.ID.Key, done.first, done.gen = "3", now.Add(-time.Minute), 3
	store := prospero.NewMemStore()
	for i, bucket := range [][]*entry{{a}, {b, done}} {
		if _, err := store.Put(ctx, legacyBucketID("s", i*17), 0, prospero.Record{State: encodeBucket(bucket)}); err != nil {
			t.Fatal(err)
		}
	}
	a.fired = 1
	if _, err := store.Put(ctx, RecordID("s"), 0, prospero.Record{State: encodeProgress(now, 3, slices.Values([]*entry{a}))}); err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{Store: store, Codec: nopCodec{}, Deliver: nopCodec{}, ShardOf: func(prospero.Identity) string { return "s" }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if err := e.Acquire(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if infos, _ := e.ListOf(a.ID); len(infos) != 1 || infos[0].LastSeq != 1 {
		t.Fatalf("a after migration: %+v", infos)
	}
	if infos, _ := e.ListOf(done.ID); len(infos) != 0 {
		t.Fatalf("a delivered one-shot came back: %+v", infos)
	}
	got := reminderRecords(t, store)
	if len(got) != 2 || got[a.Key] == nil || got[b.Key] == nil || got[b.Key].per != time.Minute {
		t.Fatalf("records after migration: %v", got)
	}
	if _, err := store.Get(ctx, RecordID("s")); err != nil {
		t.Fatalf("progress record after migration: %v", err)
	}
}

func TestShardOfRecord(t *testing.T) {
	k := Key{ID: prospero.Identity{Kind: "acct", Key: "x/17"}, Name: "n/1"}
	for key, want := range map[string]string{"acct#3": "acct#3", "acct#3/17": "acct#3", "a/b#3/0": "a/b#3", "a/b#3": "a/b#3", "local": "local",
		ReminderID("acct#3", k).Key: "acct#3", ReminderID("a/b#3", k).Key: "a/b#3", RecordID("g#1").Key: "g#1"} {
		if got := ShardOfRecord(key); got != want {
			t.Errorf("ShardOfRecord(%q) = %q, want %q", key, got, want)
		}
	}
	if ReminderID("s", k) == ReminderID("s", Key{ID: k.ID, Name: "n/2"}) || ReminderID("s", k) == ReminderID("t", k) {
		t.Fatal("two reminders share a record")
	}
	if long := (Key{ID: prospero.Identity{Kind: "acct", Key: string(make([]byte, 4096))}, Name: "n"}); len(ReminderID("s", long).Key) != len("s/")+digestHex {
		t.Fatal("a record key grows with the identity")
	}
}

// A damaged reminder record is left unloaded; its shard's other
// reminders still load and fire.
func TestDamagedRecordDoesNotBlockItsShard(t *testing.T) {
	ctx := context.Background()
	store := prospero.NewMemStore()
	good := newEntry("good", time.Hour, FireOnce, 0)
	good.first = time.Now().Add(time.Hour)
	bad := newEntry("bad", time.Hour, FireOnce, 0)
	bad.ID.Key, bad.first = "2", good.first
	moved := newEntry("moved", time.Hour, FireOnce, 0)
	moved.ID.Key, moved.first = "3", good.first
	for id, rec := range map[prospero.Identity][]byte{
		ReminderID("s", good.Key):  encodeReminder(good),
		ReminderID("s", bad.Key):   encodeReminder(bad)[:10], // cut short
		ReminderID("s", moved.Key): encodeReminder(good),     // another reminder's record
	} {
		if _, err := store.Put(ctx, id, 0, prospero.Record{State: rec}); err != nil {
			t.Fatal(err)
		}
	}
	e, err := New(Config{Store: store, Codec: nopCodec{}, Deliver: nopCodec{}, ShardOf: func(prospero.Identity) string { return "s" }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if err := e.Acquire(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Reminders != 1 {
		t.Fatalf("%d reminders loaded, want the good one alone", st.Reminders)
	}
	if infos, _ := e.ListOf(good.ID); len(infos) != 1 {
		t.Fatalf("the good reminder: %+v", infos)
	}
}

// A store that cannot list a shard's records is refused at New.
func TestStoreMustScan(t *testing.T) {
	_, err := New(Config{Store: plainStore{prospero.NewMemStore()}, Codec: nopCodec{}, Deliver: nopCodec{},
		ShardOf: func(prospero.Identity) string { return "s" }})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New with a store that cannot scan: %v", err)
	}
}

type plainStore struct{ prospero.StateStore }

// A paused shard fires nothing, refuses its tick in flight at the turn,
// takes new reminders without firing them, and on Resume fires each
// reminder by its catch-up policy, the cut-off flight counted failed.
func TestSchedulePauseAndResume(t *testing.T) {
	s := NewSchedule(time.Minute)
	a := newEntry("a", time.Second, FireOnce, 0)
	other := newEntry("o", time.Second, FireOnce, 0)
	other.shard = "t"
	s.put(a)
	s.put(other)
	inFlight := s.Due(t0.Add(time.Second), nil)
	if len(inFlight) != 2 {
		t.Fatalf("fired %+v", inFlight)
	}
	for _, f := range inFlight {
		if f.Shard == "t" {
			s.Delivered(f, t0.Add(time.Second))
		}
	}
	if !s.Pause("s") || s.Pause("s") || !s.Paused("s") {
		t.Fatal("Pause did not report the first pause only")
	}
	var fa Fire
	for _, f := range inFlight {
		if f.Shard == "s" {
			fa = f
		}
	}
	if ok, _ := s.Delivered(fa, t0.Add(2*time.Second)); ok {
		t.Fatal("the tick in flight of a paused shard was accepted at its turn")
	}
	s.Failed(fa, t0.Add(2*time.Second), time.Second) // refused: counted by Resume
	late := newEntry("b", time.Second, Skip, 0)
	s.put(late)
	var firedOther int
	for sec := 2; sec <= 10; sec++ {
		for _, f := range s.Due(t0.Add(time.Duration(sec)*time.Second), nil) {
			if f.Shard == "s" {
				t.Fatalf("paused shard fired %+v at %ds", f, sec)
			}
			firedOther++
			s.Delivered(f, t0.Add(time.Duration(sec)*time.Second))
		}
	}
	if firedOther != 9 {
		t.Fatalf("the other shard fired %d ticks while s was paused, want 9", firedOther)
	}
	if c := s.Counts(); c.Failed != 0 {
		t.Fatalf("failed %d before Resume", c.Failed)
	}
	if !s.Resume("s") || s.Resume("s") {
		t.Fatal("Resume did not report the first resume only")
	}
	now := t0.Add(10*time.Second + 500*time.Millisecond)
	got := map[string][]uint64{}
	for _, f := range s.Due(now, nil) {
		got[f.Name] = append(got[f.Name], f.Seq)
		if ok, _ := s.Delivered(f, now); !ok {
			t.Fatalf("tick %+v refused after Resume", f)
		}
	}
	// a: occurrence 1 never ran; 1..10 are due: one tick, the newest.
	// b (Skip) goes on with occurrence 11; o ticked at 10 s already.
	if fmt.Sprint(got) != "map[a:[10]]" {
		t.Fatalf("after Resume: %v", got)
	}
	if c := s.Counts(); c.Failed != 1 {
		t.Fatalf("failed %d after Resume, want 1 (the flight the pause cut off)", c.Failed)
	}
	if fs := s.Due(t0.Add(11*time.Second), nil); len(fs) != 3 {
		t.Fatalf("at 11s: %+v, want a, b and o", fs)
	}
	s.Pause("s")
	if n := s.dropShard("s"); n != 2 || s.Paused("s") {
		t.Fatalf("dropShard of a paused shard: %d dropped, paused %v", n, s.Paused("s"))
	}
}

// A flight cut off by a pause whose refusal arrives after Resume names
// an old flight: it neither counts a second failure nor delays the tick
// Resume fired again. The occurrence is accepted once, by whichever
// flight reaches its turn first.
func TestScheduleCutOffFlightAfterResume(t *testing.T) {
	s := NewSchedule(time.Minute)
	s.put(newEntry("a", time.Second, FireOnce, 0))
	old := s.Due(t0.Add(time.Second), nil)
	if len(old) != 1 {
		t.Fatalf("fired %+v", old)
	}
	s.Pause("s")
	s.Resume("s")
	now := t0.Add(1500 * time.Millisecond)
	again := s.Due(now, nil)
	if len(again) != 1 || again[0].Seq != old[0].Seq || again[0].Flight == old[0].Flight {
		t.Fatalf("after Resume fired %+v, the cut-off flight was %+v", again, old)
	}
	s.Failed(old[0], now, time.Hour) // the cut-off flight's refusal, late
	if c := s.Counts(); c.Failed != 1 {
		t.Fatalf("failed %d, want 1 (counted by Resume alone)", c.Failed)
	}
	if ok, _ := s.Delivered(again[0], now); !ok {
		t.Fatal("the flight Resume fired was refused: the late refusal of the old one moved it")
	}
	if ok, _ := s.Delivered(old[0], now); ok {
		t.Fatal("the occurrence was accepted twice")
	}
}

// A slow mailbox: the tick re-fired after its deadline, and an earlier
// flight of the same occurrence reaches its turn first; it is accepted
// (else every flight would be refused while the backlog lasts), the
// later one is not.
func TestScheduleEarlierFlightOfTheOccurrenceDelivers(t *testing.T) {
	s := NewSchedule(time.Minute)
	s.put(newEntry("once", 0, FireOnce, 0))
	first := s.Due(t0.Add(time.Hour), nil)
	second := s.Due(t0.Add(time.Hour+time.Minute), nil) // past the delivery timeout
	if len(first) != 1 || len(second) != 1 || first[0].Seq != second[0].Seq || first[0].Flight == second[0].Flight {
		t.Fatalf("fired %+v, then %+v", first, second)
	}
	if ok, removed := s.Delivered(first[0], t0.Add(time.Hour+time.Minute)); !ok || !removed {
		t.Fatalf("the earlier flight: Delivered = %v, %v", ok, removed)
	}
	if ok, _ := s.Delivered(second[0], t0.Add(time.Hour+time.Minute)); ok {
		t.Fatal("the one-shot was delivered twice")
	}
}
