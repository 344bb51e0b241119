package reminders

import (
	"testing"
	"time"

	"github.com/tempest-actors/tempest/prospero"
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
			if ok, _ := s.Delivered(f.Key, f.Gen, f.Seq, now); !ok {
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
		s.Delivered(fs[0].Key, fs[0].Gen, fs[0].Seq, now)
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
	if ok, _ := s.Delivered(first[0].Key, first[0].Gen, first[0].Seq, t0.Add(6*time.Second)); ok {
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
	if ok, _ := s.Delivered(f.Key, f.Gen, f.Seq, t0.Add(time.Second)); ok {
		t.Fatal("tick of a removed reminder accepted")
	}
	e := newEntry("r", time.Second, FireOnce, 0)
	s.put(e)
	f = s.Due(t0.Add(time.Second), nil)[0]
	e2 := newEntry("r", time.Second, FireOnce, 0)
	e2.gen = 2
	s.put(e2)
	if ok, _ := s.Delivered(f.Key, f.Gen, f.Seq, t0.Add(time.Second)); ok {
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
	if ok, removed := s.Delivered(fs[0].Key, fs[0].Gen, 1, t0.Add(time.Hour)); !ok || !removed {
		t.Fatalf("Delivered = %v, %v", ok, removed)
	}
	if s.Len() != 0 {
		t.Fatal("one-shot kept after delivery")
	}
}

func TestRecordRoundTrip(t *testing.T) {
	a := newEntry("a", time.Second, FireUpTo, 3)
	a.ptype, a.pdata, a.fired = "acct.Bill", []byte{1, 2, 3}, 42
	b := newEntry("b", 0, Skip, 0)
	got, err := decodeShard("s", encodeShard([]*entry{a, b}))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Key != a.Key || !got[0].first.Equal(a.first) || got[0].per != a.per ||
		got[0].pol != a.pol || got[0].maxN != 3 || got[0].ptype != a.ptype || string(got[0].pdata) != string(a.pdata) ||
		got[0].fired != 42 || got[1].Name != "b" || got[1].per != 0 {
		t.Fatalf("round trip: %+v %+v", got[0], got[1])
	}
	if _, err := decodeShard("s", []byte{1, 5}); err == nil {
		t.Fatal("truncated record accepted")
	}
}
