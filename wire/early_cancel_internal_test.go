package wire

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestEarlyCancelsBounded: withdrawals kept for asks not arrived yet are
// kept EarlyCancelTTL and at most MaxEarlyCancels at once, the oldest
// evicted first (counted); a kept one is used up by its ask; a peer's go
// when its link goes down.
func TestEarlyCancelsBounded(t *testing.T) {
	var e earlyCancels
	var evicted atomic.Uint64
	now := time.Unix(1000, 0).UnixNano()
	for i := range MaxEarlyCancels + 1 {
		e.keep(inboundKey{"a", uint64(i + 1)}, now, &evicted)
	}
	if n := e.n.Load(); n != MaxEarlyCancels {
		t.Fatalf("%d kept, want %d", n, MaxEarlyCancels)
	}
	if evicted.Load() != 1 || e.take(inboundKey{"a", 1}, now) {
		t.Fatalf("evicted %d; the oldest must be the one gone", evicted.Load())
	}
	if !e.take(inboundKey{"a", 2}, now) || e.take(inboundKey{"a", 2}, now) {
		t.Fatal("a kept withdrawal must match its ask once")
	}
	if e.take(inboundKey{"a", 3}, now+int64(EarlyCancelTTL)) {
		t.Fatal("a withdrawal older than its time matched")
	}
	e.keep(inboundKey{"b", 7}, now, &evicted)
	e.dropPeer("a")
	if n := e.n.Load(); n != 1 || !e.take(inboundKey{"b", 7}, now) {
		t.Fatalf("after a's link went down %d kept, want b's only", n)
	}
	later := now + int64(2*EarlyCancelTTL)
	e.keep(inboundKey{"c", 1}, later, &evicted)
	if n := e.n.Load(); n != 1 || evicted.Load() != 1 {
		t.Fatalf("expired entries not trimmed: %d kept, %d evicted", n, evicted.Load())
	}
}

// TestEarlyCancelsBoundLiveOnly: the bound counts the withdrawals still
// kept, not those their asks used up: with MaxEarlyCancels-1 kept after
// many were matched, keeping one more evicts nothing, and the order of
// arrival does not grow without the entries it names.
func TestEarlyCancelsBoundLiveOnly(t *testing.T) {
	var e earlyCancels
	var evicted atomic.Uint64
	now := time.Unix(1000, 0).UnixNano()
	id := uint64(0)
	// One withdrawal whose ask is slow, then many, each matched by its
	// ask soon after.
	e.keep(inboundKey{"slow", 1}, now, &evicted)
	for range 3 * MaxEarlyCancels {
		id++
		e.keep(inboundKey{"a", id}, now, &evicted)
		if !e.take(inboundKey{"a", id}, now) {
			t.Fatalf("withdrawal %d did not match its ask", id)
		}
	}
	if ev := evicted.Load(); ev != 0 {
		t.Fatalf("%d evicted with 1 kept", ev)
	}
	// Then as many as the bound allows, none matched.
	first := id + 1
	for range MaxEarlyCancels - 1 {
		id++
		e.keep(inboundKey{"a", id}, now, &evicted)
	}
	if ev := evicted.Load(); ev != 0 {
		t.Fatalf("%d evicted with at most %d kept at once", ev, MaxEarlyCancels)
	}
	if n := e.n.Load(); n != MaxEarlyCancels {
		t.Fatalf("%d kept, want %d", n, MaxEarlyCancels)
	}
	if !e.take(inboundKey{"slow", 1}, now) || !e.take(inboundKey{"a", first}, now) {
		t.Fatal("the oldest live withdrawals were evicted")
	}
	if len(e.order) > 2*MaxEarlyCancels+1 {
		t.Fatalf("order holds %d entries for %d kept", len(e.order), len(e.at))
	}
	// A withdrawal kept again after it was matched is one entry, once.
	e.keep(inboundKey{"b", 1}, now, &evicted)
	e.take(inboundKey{"b", 1}, now)
	e.keep(inboundKey{"b", 1}, now, &evicted)
	if ev := evicted.Load(); ev != 0 {
		t.Fatalf("%d evicted re-keeping a matched withdrawal", ev)
	}
	if !e.take(inboundKey{"b", 1}, now) {
		t.Fatal("a withdrawal kept again was lost")
	}
}
