package ariel

import (
	"context"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
)

type groupProbe struct{ to, seq int }

// TestCloseGroupsMakesEachRecipientContiguous drives the send path of an
// executor directly: sends interleaved over 3 and over 40 recipients (the
// scanned and the indexed grouping) come out of closeGroups as one run per
// recipient, in the order of each recipient's first send, with send order
// kept inside each run, and the credit a group reserved beyond its sends
// is returned.
func TestCloseGroupsMakesEachRecipientContiguous(t *testing.T) {
	for _, n := range []int{3, 40} {
		s, err := New(Config{Workers: 1, MailboxCapacity: 1 << 12})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = s.Close(ctx)
		})
		self, _ := s.local.Resolve(mustSpawn(t, s))
		cells := make([]*Cell, n)
		refs := make([]actor.Ref, n)
		for i := range cells {
			refs[i] = mustSpawn(t, s)
			cells[i], _ = s.local.Resolve(refs[i])
		}
		ex := &executor{s: s, cnt: s.newCounters(), budget: 1, cell: self}
		// Recipient order of first sends: n-1, 0, 1, ..., n-2; then rounds
		// that interleave every recipient.
		const rounds = 20
		order := append([]int{n - 1}, make([]int, 0, n)...)
		for i := 0; i < n-1; i++ {
			order = append(order, i)
		}
		seq := make([]int, n)
		for r := 0; r < rounds; r++ {
			for _, i := range order {
				if err := ex.send(refs[i], groupProbe{i, seq[i]}, nil, 0); err != nil {
					t.Fatal(err)
				}
				seq[i]++
			}
		}
		if !ex.interleaved {
			t.Fatalf("%d recipients: interleaved sends not noticed", n)
		}
		ex.closeGroups()
		if len(ex.outTo) != n*rounds {
			t.Fatalf("%d recipients: %d sends buffered, want %d", n, len(ex.outTo), n*rounds)
		}
		for k, c := range ex.outTo {
			want := cells[order[k/rounds]]
			m := ex.outEnv[k].msg.(groupProbe)
			if c != want || cells[m.to] != c || m.seq != k%rounds {
				t.Fatalf("%d recipients: send %d is %+v for the wrong place", n, k, m)
			}
		}
		for i, c := range cells {
			if got := c.count.Load(); got != rounds {
				t.Fatalf("%d recipients: recipient %d holds %d reservations, want %d", n, i, got, rounds)
			}
		}
		if len(ex.groups) != 0 || ex.lastG != 0 || ex.interleaved {
			t.Fatalf("%d recipients: groups not reset", n)
		}
		for _, k := range ex.table.keys {
			if k != nil {
				t.Fatalf("%d recipients: lookup table keeps a cell after the turn", n)
			}
		}
		// Undo the reservations so Close has nothing in flight.
		for _, c := range ex.outTo {
			c.unreserve(1)
		}
		clear(ex.outTo)
		clear(ex.outEnv)
		ex.outTo, ex.outEnv, ex.outG = ex.outTo[:0], ex.outEnv[:0], ex.outG[:0]
	}
}

func mustSpawn(t *testing.T, s *Scheduler) actor.Ref {
	t.Helper()
	ref, err := s.Spawn(actor.Func(func(actor.Context, any) {}))
	if err != nil {
		t.Fatal(err)
	}
	return ref
}
