package prospero_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/prospero"
	"pgregory.net/rapid"
)

func ident(kind string, i int) prospero.Identity {
	return prospero.Identity{Kind: kind, Key: fmt.Sprint(i)}
}

func TestActivityIdlePerKind(t *testing.T) {
	a := prospero.NewActivity()
	a.Touch(ident("fast", 1), time.Second, t0)
	a.Touch(ident("slow", 1), time.Minute, t0)
	a.Touch(ident("fast", 2), time.Second, t0.Add(500*time.Millisecond))
	a.Touch(ident("never", 1), prospero.NeverIdle, t0)
	if got := a.Idle(t0.Add(999*time.Millisecond), nil); len(got) != 0 {
		t.Fatalf("idle too early: %v", got)
	}
	if got := a.Idle(t0.Add(time.Second), nil); !slices.Equal(got, []prospero.Identity{ident("fast", 1)}) {
		t.Fatalf("idle at 1s: %v", got)
	}
	if next, ok := a.NextIdle(); !ok || !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("NextIdle = %v %v", next, ok)
	}
	// Touching renews.
	a.Touch(ident("fast", 1), time.Second, t0.Add(time.Second))
	got := a.Idle(t0.Add(1500*time.Millisecond), nil)
	if !slices.Equal(got, []prospero.Identity{ident("fast", 2)}) {
		t.Fatalf("idle at 1.5s: %v", got)
	}
	got = a.Idle(t0.Add(time.Hour), nil)
	slices.SortFunc(got, func(x, y prospero.Identity) int { return compareID(x, y) })
	want := []prospero.Identity{ident("fast", 1), ident("fast", 2), ident("slow", 1)}
	if !slices.Equal(got, want) {
		t.Fatalf("idle after an hour: %v, want %v", got, want)
	}
}

func compareID(x, y prospero.Identity) int {
	if x.String() < y.String() {
		return -1
	}
	if x.String() > y.String() {
		return 1
	}
	return 0
}

// The LRU yields exactly the least recently used identities beyond the
// limit, and removing them never leaves more than max active.
func TestActivityLRUProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := prospero.NewActivity()
		var model []prospero.Identity // least recently used first
		max := rapid.IntRange(1, 8).Draw(t, "max")
		now := t0
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			id := ident(rapid.SampledFrom([]string{"a", "b"}).Draw(t, "kind"), rapid.IntRange(0, 15).Draw(t, "key"))
			now = now.Add(time.Millisecond)
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0, 1: // touch
				a.Touch(id, time.Hour, now)
				model = slices.DeleteFunc(model, func(x prospero.Identity) bool { return x == id })
				model = append(model, id)
			case 2: // remove
				had := slices.Contains(model, id)
				if got := a.Remove(id); got != had {
					t.Fatalf("Remove(%v) = %v, model says %v", id, got, had)
				}
				model = slices.DeleteFunc(model, func(x prospero.Identity) bool { return x == id })
			case 3: // shed
				victims := a.Over(max, nil)
				var want []prospero.Identity
				if len(model) > max {
					want = model[:len(model)-max]
				}
				if !slices.Equal(victims, want) {
					t.Fatalf("Over(%d) = %v, want %v", max, victims, want)
				}
				for _, v := range victims {
					a.Remove(v)
				}
				model = model[len(want):]
				if a.Len() > max {
					t.Fatalf("after shedding %d active > max %d", a.Len(), max)
				}
			}
			if a.Len() != len(model) {
				t.Fatalf("Len %d, model %d", a.Len(), len(model))
			}
		}
	})
}

func TestHydrationGateFIFO(t *testing.T) {
	g := prospero.NewHydrationGate(2)
	for i := range 5 {
		started := g.Acquire(ident("k", i))
		if started != (i < 2) {
			t.Fatalf("Acquire %d started=%v", i, started)
		}
	}
	if g.InFlight() != 2 || g.Waiting() != 3 {
		t.Fatalf("inflight %d waiting %d", g.InFlight(), g.Waiting())
	}
	for want := 2; want < 5; want++ {
		id, ok := g.Release()
		if !ok || id != ident("k", want) {
			t.Fatalf("Release gave %v %v, want %v", id, ok, ident("k", want))
		}
		if g.InFlight() != 2 {
			t.Fatalf("slot not handed over: inflight %d", g.InFlight())
		}
	}
	g.Release()
	g.Release()
	if g.InFlight() != 0 || g.Waiting() != 0 {
		t.Fatalf("inflight %d waiting %d after all released", g.InFlight(), g.Waiting())
	}
}

func TestHydrationGateProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		max := rapid.IntRange(1, 4).Draw(t, "max")
		g := prospero.NewHydrationGate(max)
		var queue []prospero.Identity
		inflight, next := 0, 0
		for range rapid.IntRange(1, 100).Draw(t, "steps") {
			if rapid.Bool().Draw(t, "acquire") {
				id := ident("k", next)
				next++
				if g.Acquire(id) {
					inflight++
				} else {
					queue = append(queue, id)
				}
			} else if inflight > 0 {
				id, ok := g.Release()
				if len(queue) > 0 {
					if !ok || id != queue[0] {
						t.Fatalf("Release = %v %v, want %v", id, ok, queue[0])
					}
					queue = queue[1:]
				} else {
					if ok {
						t.Fatalf("Release handed over %v from an empty queue", id)
					}
					inflight--
				}
			}
			if inflight > max || g.InFlight() != inflight || g.Waiting() != len(queue) {
				t.Fatalf("inflight %d (gate %d, max %d) waiting %d (gate %d)", inflight, g.InFlight(), max, len(queue), g.Waiting())
			}
			if len(queue) > 0 && inflight < max {
				t.Fatalf("identities wait while a slot is free")
			}
		}
	})
}
