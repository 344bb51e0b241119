package reminders

import (
	"bytes"
	"slices"
	"testing"
	"time"
)

// The reminder and progress records reach a node from its peers (a
// handoff ships them, replication copies them): whatever bytes arrive,
// decoding returns records or an error, never panics, and a record that
// decodes holds a reminder registration would accept and encodes again
// to the same bytes.
func FuzzDecodeReminder(f *testing.F) {
	a := newEntry("a", time.Second, FireUpTo, 3)
	a.ptype, a.pdata = "acct.Bill", []byte{1, 2, 3}
	f.Add(encodeReminder(a))
	f.Add(encodeReminder(newEntry("b", 0, Skip, 0)))
	f.Add([]byte{3, 5})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := decodeReminder("s", b)
		if err != nil {
			return
		}
		if err := checkEntry("s", x); err != nil {
			t.Fatalf("decoded a reminder registration refuses: %v", err)
		}
		again := encodeReminder(x)
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoded record differs:\n%x\n%x", b, again)
		}
	})
}

// The previous format's buckets are still read, to migrate them.
func FuzzDecodeBucket(f *testing.F) {
	a := newEntry("a", time.Second, FireUpTo, 3)
	a.ptype, a.pdata = "acct.Bill", []byte{1, 2, 3}
	f.Add(encodeBucket([]*entry{a, newEntry("b", 0, Skip, 0)}))
	f.Add([]byte{2, 5})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := decodeBucket("s", b)
		if err != nil {
			return
		}
		again, err := decodeBucket("s", encodeBucket(es))
		if err != nil || len(again) != len(es) {
			t.Fatalf("re-encoded bucket: %d reminders, %v; want %d", len(again), err, len(es))
		}
		for i := range es {
			if again[i].Key != es[i].Key || again[i].per != es[i].per || again[i].maxN != es[i].maxN {
				t.Fatalf("reminder %d changed in a round trip: %+v, %+v", i, es[i], again[i])
			}
		}
	})
}

func FuzzDecodeShardRecord(f *testing.F) {
	at := t0.Add(10 * time.Second)
	late := newEntry("late", time.Second, FireOnce, 0)
	late.gen, late.fired = 2, 3
	f.Add(encodeProgress(at, 3, slices.Values([]*entry{late})))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _ = decodeShardRecord("s", b)
	})
}
