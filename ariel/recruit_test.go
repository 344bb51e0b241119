package ariel_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

// work spins for about d: a turn with measurable work.
func work(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// TestRecruitedGroupsKeepOrderAndOneTurnAtATime: turns that send several
// messages each to many idle recipients, interleaved, leave their worker
// holding a group per recipient, which idle workers are recruited to
// claim (Stats.Recruited). Every recipient sees each sender's messages
// exactly once and in order, and never runs two turns at once, whichever
// worker runs its group.
func TestRecruitedGroupsKeepOrderAndOneTurnAtATime(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 4, MailboxCapacity: 1 << 12, RecruitWork: time.Nanosecond})
	const recipients, senders, perTurn = 64, 3, 3
	var (
		bad  atomic.Value
		got  atomic.Int64
		sent atomic.Int64
	)
	refs := make([]actor.Ref, recipients)
	for r := range refs {
		last := make([]int, senders)
		for i := range last {
			last[i] = -1
		}
		var in atomic.Bool
		refs[r], _ = s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
			m, ok := msg.(seqMsg)
			if !ok {
				return
			}
			if !in.CompareAndSwap(false, true) {
				bad.CompareAndSwap(nil, "two turns of one actor at once")
			}
			if m.seq != last[m.from]+1 {
				bad.CompareAndSwap(nil, m)
			}
			last[m.from] = m.seq
			work(5 * time.Microsecond)
			got.Add(1)
			in.Store(false)
		}))
	}
	senderRefs := make([]actor.Ref, senders)
	for i := range senderRefs {
		k := 0
		senderRefs[i], _ = s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
			if _, ok := msg.(string); !ok {
				return
			}
			for j := 0; j < perTurn; j++ {
				for _, r := range refs {
					if err := ctx.Tell(r, seqMsg{i, k}); err != nil {
						bad.CompareAndSwap(nil, err)
						continue
					}
					sent.Add(1)
				}
				k++
			}
		}))
	}
	// Rounds until some group ran on a worker other than its holder (at
	// most a bound: the test fails if none ever did).
	for round := 0; round < 500 && s.Stats().Recruited == 0 || round < 20; round++ {
		for _, a := range senderRefs {
			if err := s.Tell(a, "go"); err != nil {
				t.Fatal(err)
			}
		}
		waitIdle(t, s)
	}
	if v := bad.Load(); v != nil {
		t.Fatalf("%v", v)
	}
	if got.Load() != sent.Load() {
		t.Fatalf("delivered %d of %d", got.Load(), sent.Load())
	}
	st := s.Stats()
	if st.Shares == 0 || st.Recruited == 0 {
		t.Fatalf("Shares %d, Recruited %d: no held group was shared and claimed", st.Shares, st.Recruited)
	}
	t.Logf("seized %d, shares %d, recruited %d of %d messages", st.Seized, st.Shares, st.Recruited, sent.Load())
}

// TestAbandonedWorkersGiveBackTheirShare: workers get stuck in turns of a
// shared fan-out (two of its groups block), leaving groups no worker
// claimed, or claimed and not run; the watchdog abandons them, those
// groups go back to their mailboxes, and the replacements run every
// message exactly once. Whether the fan-out is shared before the holder
// reaches the groups that block is a race, so the scenario runs until a
// run both shared it and had a worker abandoned (every run checks that
// each message ran exactly once).
func TestAbandonedWorkersGiveBackTheirShare(t *testing.T) {
	for attempt := 0; ; attempt++ {
		if shares, exhausted := abandonedShareRun(t); shares > 0 && exhausted > 0 {
			return
		}
		if attempt == 10 {
			t.Fatal("in 10 runs no shared fan-out had a worker abandoned")
		}
	}
}

// abandonedShareRun runs the scenario once and returns how many times
// the fan-out was shared and how many workers the watchdog abandoned.
func abandonedShareRun(t *testing.T) (shares, exhausted uint64) {
	s := newSched(t, ariel.Config{Workers: 2, TurnBudget: 200 * time.Millisecond, RecruitWork: time.Nanosecond})
	const n = 200
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	var got atomic.Int64
	counts := make([]atomic.Int32, n)
	refs := make([]actor.Ref, n)
	for i := range refs {
		refs[i], _ = s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
			switch msg {
			case "x":
				counts[i].Add(1)
				work(5 * time.Microsecond)
				got.Add(1)
			case "stuck":
				<-release
			}
		}))
	}
	src, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if msg == "go" {
			for i, r := range refs {
				_ = ctx.Tell(r, "x")
				if i == 100 || i == 101 {
					_ = ctx.Tell(r, "stuck")
				}
			}
		}
	}))
	waitIdle(t, s) // the recipients are idle with empty mailboxes: seized
	if err := s.Tell(src, "go"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return got.Load() == n })
	st := s.Stats()
	once.Do(func() { close(release) })
	for i := range counts {
		if c := counts[i].Load(); c != 1 {
			t.Fatalf("recipient %d ran its message %d times", i, c)
		}
	}
	t.Logf("seized %d, shares %d, recruited %d, exhausted %d", st.Seized, st.Shares, st.Recruited, st.Exhausted)
	return st.Shares, st.Exhausted
}
