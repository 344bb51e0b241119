// Package storetest is the contract test suite every prospero.StateStore
// implementation must pass. Call Run from a test with a factory that
// returns a fresh, empty store.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/tempest-actors/tempest/prospero"
)

// Factory returns a fresh, empty store. Run closes it.
type Factory func(t *testing.T) prospero.StateStore

// Run runs the contract suite against stores made by newStore.
func Run(t *testing.T, newStore Factory) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, prospero.StateStore)
	}{
		{"GetMissing", testGetMissing},
		{"PutGet", testPutGet},
		{"ConditionalPut", testConditionalPut},
		{"ConditionalDelete", testConditionalDelete},
		{"VersionsNeverReused", testVersionsNeverReused},
		{"KindsAndKeysAreSeparate", testSeparate},
		{"CallerOwnsBuffers", testBuffers},
		{"InvalidIdentity", testInvalidIdentity},
		{"CanceledContext", testCanceled},
		{"ConcurrentWritersOneWins", testConcurrentWriters},
		{"Close", testClose},
		{"AsyncPuts", testAsync},
		{"AsyncDeletes", testAsyncDelete},
		{"ScanPrefix", testScanPrefix},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			defer s.Close()
			tc.fn(t, s)
		})
	}
}

var (
	idA = prospero.Identity{Kind: "counter", Key: "a"}
	idB = prospero.Identity{Kind: "counter", Key: "b"}
	idC = prospero.Identity{Kind: "cart", Key: "a"}
)

func mustPut(t *testing.T, s prospero.StateStore, id prospero.Identity, expected uint64, rec prospero.Record) uint64 {
	t.Helper()
	v, err := s.Put(context.Background(), id, expected, rec)
	if err != nil {
		t.Fatalf("Put(%s, %d): %v", id, expected, err)
	}
	if v == 0 {
		t.Fatalf("Put(%s) returned version 0", id)
	}
	return v
}

func mustGet(t *testing.T, s prospero.StateStore, id prospero.Identity) prospero.Record {
	t.Helper()
	r, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return r
}

func testGetMissing(t *testing.T, s prospero.StateStore) {
	if _, err := s.Get(context.Background(), idA); !errors.Is(err, prospero.ErrNotFound) {
		t.Fatalf("Get of missing: got %v, want ErrNotFound", err)
	}
}

func testPutGet(t *testing.T, s prospero.StateStore) {
	v := mustPut(t, s, idA, 0, prospero.Record{Incarnation: 3, State: []byte("hello")})
	got := mustGet(t, s, idA)
	if got.Version != v || got.Incarnation != 3 || string(got.State) != "hello" {
		t.Fatalf("got %+v, want version %d incarnation 3 state hello", got, v)
	}
	// An empty state reads back as empty, keeping the incarnation.
	v2 := mustPut(t, s, idA, v, prospero.Record{Incarnation: 1 << 40})
	got = mustGet(t, s, idA)
	if got.Version != v2 || got.Incarnation != 1<<40 || len(got.State) != 0 {
		t.Fatalf("got %+v, want version %d incarnation 2^40 empty state", got, v2)
	}
	if v2 <= v {
		t.Fatalf("versions not increasing: %d then %d", v, v2)
	}
}

func testConditionalPut(t *testing.T, s prospero.StateStore) {
	ctx := context.Background()
	v := mustPut(t, s, idA, 0, prospero.Record{State: []byte("1")})
	// Creating again must fail: a record exists.
	if _, err := s.Put(ctx, idA, 0, prospero.Record{State: []byte("x")}); !errors.Is(err, prospero.ErrVersionConflict) {
		t.Fatalf("create over existing: got %v, want ErrVersionConflict", err)
	}
	// A stale or made-up version fails.
	for _, bad := range []uint64{v + 1, v + 1000, prospero.AnyVersion} {
		if _, err := s.Put(ctx, idA, bad, prospero.Record{State: []byte("x")}); !errors.Is(err, prospero.ErrVersionConflict) {
			t.Fatalf("Put with expected %d (stored %d): got %v, want ErrVersionConflict", bad, v, err)
		}
	}
	if got := mustGet(t, s, idA); string(got.State) != "1" || got.Version != v {
		t.Fatalf("failed Put changed the record: %+v", got)
	}
	v2 := mustPut(t, s, idA, v, prospero.Record{State: []byte("2")})
	if _, err := s.Put(ctx, idA, v, prospero.Record{State: []byte("3")}); !errors.Is(err, prospero.ErrVersionConflict) {
		t.Fatalf("Put with superseded version: got %v, want ErrVersionConflict", err)
	}
	if got := mustGet(t, s, idA); string(got.State) != "2" || got.Version != v2 {
		t.Fatalf("got %+v, want state 2 at version %d", got, v2)
	}
}

func testConditionalDelete(t *testing.T, s prospero.StateStore) {
	ctx := context.Background()
	// Deleting nothing succeeds.
	if err := s.Delete(ctx, idA, 0); err != nil {
		t.Fatalf("Delete of missing with 0: %v", err)
	}
	if err := s.Delete(ctx, idA, prospero.AnyVersion); err != nil {
		t.Fatalf("Delete of missing with AnyVersion: %v", err)
	}
	if err := s.Delete(ctx, idA, 7); !errors.Is(err, prospero.ErrVersionConflict) {
		t.Fatalf("Delete of missing with 7: got %v, want ErrVersionConflict", err)
	}
	v := mustPut(t, s, idA, 0, prospero.Record{State: []byte("1")})
	if err := s.Delete(ctx, idA, v+1); !errors.Is(err, prospero.ErrVersionConflict) {
		t.Fatalf("Delete with wrong version: got %v, want ErrVersionConflict", err)
	}
	mustGet(t, s, idA)
	if err := s.Delete(ctx, idA, v); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Get(ctx, idA); !errors.Is(err, prospero.ErrNotFound) {
		t.Fatalf("Get after Delete: got %v, want ErrNotFound", err)
	}
	v = mustPut(t, s, idA, 0, prospero.Record{State: []byte("2")})
	if err := s.Delete(ctx, idA, prospero.AnyVersion); err != nil {
		t.Fatalf("Delete AnyVersion: %v", err)
	}
	if _, err := s.Get(ctx, idA); !errors.Is(err, prospero.ErrNotFound) {
		t.Fatalf("Get after Delete: got %v, want ErrNotFound", err)
	}
}

// A writer holding a version from before a Delete must not succeed
// against a re-created record (no ABA).
func testVersionsNeverReused(t *testing.T, s prospero.StateStore) {
	seen := map[uint64]bool{}
	var last uint64
	for i := range 5 {
		v := mustPut(t, s, idA, 0, prospero.Record{State: []byte{byte(i)}})
		if seen[v] || v <= last {
			t.Fatalf("round %d: version %d reused or not increasing (last %d)", i, v, last)
		}
		seen[v], last = true, v
		if err := s.Delete(context.Background(), idA, v); err != nil {
			t.Fatal(err)
		}
	}
}

func testSeparate(t *testing.T, s prospero.StateStore) {
	mustPut(t, s, idA, 0, prospero.Record{Incarnation: 1, State: []byte("A")})
	mustPut(t, s, idB, 0, prospero.Record{Incarnation: 2, State: []byte("B")})
	mustPut(t, s, idC, 0, prospero.Record{Incarnation: 3, State: []byte("C")})
	for id, want := range map[prospero.Identity]string{idA: "A", idB: "B", idC: "C"} {
		if got := mustGet(t, s, id); string(got.State) != want {
			t.Errorf("%s: got %q, want %q", id, got.State, want)
		}
	}
	if err := s.Delete(context.Background(), idA, prospero.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, idC); string(got.State) != "C" {
		t.Errorf("deleting %s touched %s", idA, idC)
	}
}

func testBuffers(t *testing.T, s prospero.StateStore) {
	buf := []byte("original")
	mustPut(t, s, idA, 0, prospero.Record{State: buf})
	copy(buf, "XXXXXXXX")
	got := mustGet(t, s, idA)
	if string(got.State) != "original" {
		t.Fatalf("store kept the caller's buffer: %q", got.State)
	}
	got.State[0] = 'Y'
	if again := mustGet(t, s, idA); !bytes.Equal(again.State, []byte("original")) {
		t.Fatalf("Get returned the store's own buffer: %q", again.State)
	}
}

func testInvalidIdentity(t *testing.T, s prospero.StateStore) {
	ctx := context.Background()
	for _, id := range []prospero.Identity{{}, {Kind: "k"}, {Key: "k"}, {Kind: "a/b", Key: "c"},
		{Kind: "k", Key: "\xff"}, {Kind: "k", Key: strings.Repeat("x", 40<<10)}} {
		if _, err := s.Get(ctx, id); !errors.Is(err, prospero.ErrInvalidIdentity) {
			t.Errorf("Get(%q): got %v, want ErrInvalidIdentity", id, err)
		}
		if _, err := s.Put(ctx, id, 0, prospero.Record{}); !errors.Is(err, prospero.ErrInvalidIdentity) {
			t.Errorf("Put(%q): got %v, want ErrInvalidIdentity", id, err)
		}
		if err := s.Delete(ctx, id, 0); !errors.Is(err, prospero.ErrInvalidIdentity) {
			t.Errorf("Delete(%q): got %v, want ErrInvalidIdentity", id, err)
		}
	}
}

func testCanceled(t *testing.T, s prospero.StateStore) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Put(ctx, idA, 0, prospero.Record{State: []byte("x")}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with canceled context: got %v, want context.Canceled", err)
	}
	if _, err := s.Get(context.Background(), idA); !errors.Is(err, prospero.ErrNotFound) {
		t.Fatalf("canceled Put wrote anyway: %v", err)
	}
}

// Many writers race to advance the same version: exactly one wins each
// round, the others see ErrVersionConflict.
func testConcurrentWriters(t *testing.T, s prospero.StateStore) {
	const writers, rounds = 8, 5
	v := mustPut(t, s, idA, 0, prospero.Record{State: []byte("start")})
	for round := range rounds {
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			wins      int
			winner    uint64
			conflicts int
		)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				nv, err := s.Put(context.Background(), idA, v, prospero.Record{State: fmt.Appendf(nil, "%d/%d", round, w)})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					wins++
					winner = nv
				case errors.Is(err, prospero.ErrVersionConflict):
					conflicts++
				default:
					t.Errorf("Put: %v", err)
				}
			}()
		}
		wg.Wait()
		if wins != 1 || conflicts != writers-1 {
			t.Fatalf("round %d: %d wins and %d conflicts, want 1 and %d", round, wins, conflicts, writers-1)
		}
		if got := mustGet(t, s, idA); got.Version != winner {
			t.Fatalf("round %d: stored version %d, winner got %d", round, got.Version, winner)
		}
		v = winner
	}
}

func testClose(t *testing.T, s prospero.StateStore) {
	mustPut(t, s, idA, 0, prospero.Record{State: []byte("x")})
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ctx := context.Background()
	if _, err := s.Get(ctx, idA); !errors.Is(err, prospero.ErrStoreClosed) {
		t.Errorf("Get after Close: got %v, want ErrStoreClosed", err)
	}
	if _, err := s.Put(ctx, idA, 0, prospero.Record{}); !errors.Is(err, prospero.ErrStoreClosed) {
		t.Errorf("Put after Close: got %v, want ErrStoreClosed", err)
	}
	if err := s.Delete(ctx, idA, prospero.AnyVersion); !errors.Is(err, prospero.ErrStoreClosed) {
		t.Errorf("Delete after Close: got %v, want ErrStoreClosed", err)
	}
}

// testAsyncDelete checks DeleteAsync, for stores that implement
// AsyncDeleter: each deletion is conditional on its own and applied in
// queue order with the writes queued beside it; done comes once per
// deletion; after Close, done gets ErrStoreClosed.
func testAsyncDelete(t *testing.T, s prospero.StateStore) {
	ad, ok := s.(prospero.AsyncDeleter)
	if !ok {
		t.Skip("not an AsyncDeleter")
	}
	del := func(id prospero.Identity, expected uint64) chan error {
		ch := make(chan error, 2)
		ad.DeleteAsync(id, expected, func(err error) { ch <- err })
		return ch
	}
	va := mustPut(t, s, idA, 0, prospero.Record{Incarnation: 1, State: []byte("a")})
	vb := mustPut(t, s, idB, 0, prospero.Record{Incarnation: 1, State: []byte("b")})
	stale := del(idA, va+100)
	a := del(idA, va)
	again := del(idA, va) // queued after a, which removed version va
	b := del(idB, prospero.AnyVersion)
	missing := del(idC, 0)
	if err := <-stale; !errors.Is(err, prospero.ErrVersionConflict) {
		t.Fatalf("DeleteAsync of a stale version = %v, want ErrVersionConflict", err)
	}
	if err := <-a; err != nil {
		t.Fatalf("DeleteAsync: %v", err)
	}
	if err := <-again; !errors.Is(err, prospero.ErrVersionConflict) {
		t.Fatalf("DeleteAsync of a deleted version = %v, want ErrVersionConflict", err)
	}
	if err := <-b; err != nil {
		t.Fatalf("DeleteAsync(AnyVersion): %v", err)
	}
	if err := <-missing; err != nil {
		t.Fatalf("DeleteAsync of an absent record: %v", err)
	}
	for _, id := range []prospero.Identity{idA, idB} {
		if _, err := s.Get(context.Background(), id); !errors.Is(err, prospero.ErrNotFound) {
			t.Fatalf("%s after DeleteAsync: %v, want ErrNotFound", id, err)
		}
	}
	if v := mustPut(t, s, idB, 0, prospero.Record{State: []byte("b2")}); v <= vb {
		t.Fatalf("version %d after a deletion of %d: reused", v, vb)
	}
	if err := <-del(prospero.Identity{Kind: "", Key: "x"}, 0); !errors.Is(err, prospero.ErrInvalidIdentity) {
		t.Fatalf("DeleteAsync of a bad identity = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-del(idA, prospero.AnyVersion); !errors.Is(err, prospero.ErrStoreClosed) {
		t.Fatalf("DeleteAsync after Close = %v, want ErrStoreClosed", err)
	}
}

// testAsync checks PutAsync, for stores that implement AsyncStore: each
// write is conditional on its own and applied in queue order; done comes
// once per write; the store copies the state; after Close, done gets
// ErrStoreClosed.
func testAsync(t *testing.T, s prospero.StateStore) {
	as, ok := s.(prospero.AsyncStore)
	if !ok {
		t.Skip("not an AsyncStore")
	}
	type result struct {
		v   uint64
		err error
	}
	put := func(id prospero.Identity, expected uint64, state []byte) chan result {
		ch := make(chan result, 2)
		as.PutAsync(id, expected, prospero.Record{Incarnation: 1, State: state}, func(v uint64, err error) { ch <- result{v, err} })
		return ch
	}
	buf := []byte("one")
	a1 := put(idA, 0, buf)
	copy(buf, "XXX")
	stale := put(idA, 0, []byte("stale")) // queued after a1, which made version 0 stale
	b1 := put(idB, 0, []byte("b"))
	r1, rs, rb := <-a1, <-stale, <-b1
	if r1.err != nil || rb.err != nil {
		t.Fatalf("PutAsync: %v, %v", r1.err, rb.err)
	}
	if !errors.Is(rs.err, prospero.ErrVersionConflict) {
		t.Fatalf("stale PutAsync = %v, want ErrVersionConflict", rs.err)
	}
	if rec := mustGet(t, s, idA); string(rec.State) != "one" || rec.Version != r1.v {
		t.Fatalf("after PutAsync: %+v (version %d), want state one", rec, r1.v)
	}
	a2 := put(idA, r1.v, []byte("two"))
	if r := <-a2; r.err != nil || r.v <= r1.v {
		t.Fatalf("chained PutAsync = %+v", r)
	}
	bad := put(prospero.Identity{Kind: "", Key: "x"}, 0, nil)
	if r := <-bad; !errors.Is(r.err, prospero.ErrInvalidIdentity) {
		t.Fatalf("PutAsync of a bad identity = %v", r.err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	closed := put(idA, 0, nil)
	if r := <-closed; !errors.Is(r.err, prospero.ErrStoreClosed) {
		t.Fatalf("PutAsync after Close = %v, want ErrStoreClosed", r.err)
	}
	for _, ch := range []chan result{a1, stale, b1, a2, bad, closed} {
		select {
		case r := <-ch:
			t.Fatalf("done called twice: %+v", r)
		default:
		}
	}
}

func testScanPrefix(t *testing.T, s prospero.StateStore) {
	sc, ok := s.(prospero.PrefixScanner)
	if !ok {
		t.Skip("not a PrefixScanner")
	}
	ctx := context.Background()
	for _, id := range []prospero.Identity{
		{Kind: "r", Key: "g#1/b"}, {Kind: "r", Key: "g#1/a"}, {Kind: "r", Key: "g#1"}, {Kind: "r", Key: "g#10/a"},
		{Kind: "r", Key: "g#0/z"}, {Kind: "q", Key: "g#1/c"},
	} {
		mustPut(t, s, id, 0, prospero.Record{Incarnation: 2, State: []byte(id.String())})
	}
	got, err := sc.ScanPrefix(ctx, "r", "g#1/")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Key != "g#1/a" || got[1].Key != "g#1/b" || string(got[0].State) != "r/g#1/a" ||
		got[0].Version == 0 || got[0].Incarnation != 2 {
		t.Fatalf("ScanPrefix(r, g#1/) = %+v, want g#1/a and g#1/b in order, with their records", got)
	}
	got[0].State[0] = 'X' // the caller's copy
	if again, _ := sc.ScanPrefix(ctx, "r", "g#1/a"); len(again) != 1 || string(again[0].State) != "r/g#1/a" {
		t.Fatalf("ScanPrefix after the caller changed its copy: %+v", again)
	}
	if none, err := sc.ScanPrefix(ctx, "none", ""); err != nil || len(none) != 0 {
		t.Fatalf("ScanPrefix of an absent kind = %v, %v", none, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := sc.ScanPrefix(cctx, "r", ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("ScanPrefix with a cancelled context = %v", err)
	}
}
