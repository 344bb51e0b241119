package reminders_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/reminders"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type bill struct{ Amount int }

// codec stores bill payloads only.
type codec struct{}

func (codec) Encode(kind string, p any) (string, []byte, error) {
	if b, ok := p.(bill); ok {
		return "bill", []byte(fmt.Sprint(b.Amount)), nil
	}
	return "", nil, fmt.Errorf("%w: %T", reminders.ErrUnknownPayload, p)
}

func (codec) Decode(kind, name string, b []byte) (any, error) {
	var n int
	_, err := fmt.Sscan(string(b), &n)
	return bill{n}, err
}

// deliverer plays the actors: each tick runs at once unless held.
type deliverer struct {
	mu    sync.Mutex
	ticks []reminders.Tick
	held  []func() bool
	hold  bool
}

func (d *deliverer) Deliver(ref actor.Ref, t reminders.Tick, accept func() bool, failed func(error)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hold {
		d.held = append(d.held, func() bool {
			if accept() {
				d.ticks = append(d.ticks, t)
				return true
			}
			return false
		})
		return nil
	}
	if accept() {
		d.ticks = append(d.ticks, t)
	}
	return nil
}

func (d *deliverer) got() []reminders.Tick {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]reminders.Tick(nil), d.ticks...)
}

var acct = prospero.Identity{Kind: "acct", Key: "1"}

func newEngine(t *testing.T, store prospero.StateStore, d reminders.Deliverer) *reminders.Engine {
	t.Helper()
	e, err := reminders.New(reminders.Config{Store: store, Codec: codec{}, Deliver: d,
		ShardOf: func(prospero.Identity) string { return "s0" }})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	if err := e.Acquire(context.Background(), "s0"); err != nil {
		t.Fatal(err)
	}
	return e
}

func closeEngine(t *testing.T, e *reminders.Engine) {
	t.Helper()
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func seqs(ts []reminders.Tick) []uint64 {
	var out []uint64
	for _, t := range ts {
		out = append(out, t.Seq)
	}
	return out
}

// specificRefusals are the sentinels of the reasons registration
// refuses a reminder for.
var specificRefusals = []error{reminders.ErrPeriodTooShort, reminders.ErrDueInPast, reminders.ErrUnknownPayload,
	reminders.ErrBadName, reminders.ErrBadCatchup, reminders.ErrTooMany, reminders.ErrTooFar}

// Each specific sentinel matches ErrInvalid by itself, so an error that
// kept only the sentinel (one that crossed to another node) still does;
// the other errors do not, and no sentinel matches another.
func TestSpecificSentinelsMatchErrInvalid(t *testing.T) {
	for _, s := range specificRefusals {
		if !errors.Is(s, reminders.ErrInvalid) {
			t.Errorf("%v does not match ErrInvalid", s)
		}
		if !errors.Is(fmt.Errorf("relayed: %w", s), reminders.ErrInvalid) {
			t.Errorf("an error wrapping %v does not match ErrInvalid", s)
		}
		for _, other := range specificRefusals {
			if other != s && errors.Is(s, other) {
				t.Errorf("%v matches %v", s, other)
			}
		}
	}
	for _, s := range []error{reminders.ErrNotFound, reminders.ErrNotOwner, reminders.ErrNotInTurn, reminders.ErrClosed} {
		if errors.Is(s, reminders.ErrInvalid) {
			t.Errorf("%v matches ErrInvalid", s)
		}
	}
	if _, err := reminders.ParseCatchup("sometimes"); !errors.Is(err, reminders.ErrBadCatchup) || !errors.Is(err, reminders.ErrInvalid) {
		t.Errorf("ParseCatchup: %v, want ErrBadCatchup and ErrInvalid", err)
	}
}

// Registration refuses bad input with typed errors and stores nothing.
func TestRegisterRefusesBadInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := prospero.NewMemStore()
		e := newEngine(t, store, &deliverer{})
		defer closeEngine(t, e)
		ctx := context.Background()
		now := time.Now()
		for _, tc := range []struct {
			r    reminders.Reminder
			want error
		}{
			{reminders.Reminder{Name: "p", Period: 10 * time.Millisecond}, reminders.ErrPeriodTooShort},
			{reminders.Reminder{Name: "p", Period: -time.Second}, reminders.ErrPeriodTooShort},
			{reminders.Reminder{Name: "d", Due: now.Add(-time.Second), Period: time.Minute}, reminders.ErrDueInPast},
			{reminders.Reminder{Name: "o"}, reminders.ErrDueInPast},
			{reminders.Reminder{Name: "u", Period: time.Minute, Payload: "not declared"}, reminders.ErrUnknownPayload},
			{reminders.Reminder{Name: strings.Repeat("n", reminders.MaxNameBytes+1), Period: time.Minute}, reminders.ErrBadName},
			{reminders.Reminder{Name: "", Period: time.Minute}, reminders.ErrBadName},
			{reminders.Reminder{Name: "c", Period: time.Minute, Catchup: reminders.FireUpTo}, reminders.ErrBadCatchup},
			{reminders.Reminder{Name: "c", Period: time.Minute, Catchup: reminders.FireUpTo, MaxCatchup: -1}, reminders.ErrBadCatchup},
			{reminders.Reminder{Name: "c", Period: time.Minute, Catchup: reminders.FireUpTo, MaxCatchup: reminders.DefaultMaxCatchup + 1}, reminders.ErrBadCatchup},
			{reminders.Reminder{Name: "c", Period: time.Minute, Catchup: reminders.FireOnce, MaxCatchup: 3}, reminders.ErrBadCatchup},
			{reminders.Reminder{Name: "c", Period: time.Minute, Catchup: reminders.FireUpTo + 1}, reminders.ErrBadCatchup},
			{reminders.Reminder{Name: "f", Period: reminders.MaxHorizon + time.Second}, reminders.ErrTooFar},
			{reminders.Reminder{Name: "f", Period: math.MaxInt64}, reminders.ErrTooFar},
			{reminders.Reminder{Name: "f", Due: now.Add(reminders.MaxHorizon + time.Hour)}, reminders.ErrTooFar},
		} {
			err := e.RegisterFor(ctx, acct, tc.r)
			if !errors.Is(err, tc.want) || !errors.Is(err, reminders.ErrInvalid) {
				t.Errorf("Register(%+v) = %v, want %v", tc.r, err, tc.want)
			}
			for _, other := range specificRefusals {
				if other != tc.want && errors.Is(err, other) {
					t.Errorf("Register(%+v) = %v: matches %v as well as %v", tc.r, err, other, tc.want)
				}
			}
		}
		for i := range reminders.DefaultMaxPerIdentity {
			if err := e.RegisterFor(ctx, acct, reminders.Reminder{Name: fmt.Sprint(i), Period: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.RegisterFor(ctx, acct, reminders.Reminder{Name: "one-too-many", Period: time.Minute}); !errors.Is(err, reminders.ErrTooMany) {
			t.Fatalf("reminder %d: %v, want ErrTooMany", reminders.DefaultMaxPerIdentity+1, err)
		}
		// Replacing an existing name is not one more.
		if err := e.RegisterFor(ctx, acct, reminders.Reminder{Name: "0", Period: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if err := e.RegisterFor(ctx, prospero.Identity{Kind: "acct", Key: "x"}, reminders.Reminder{Name: "a", Period: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if got, _ := e.ListOf(acct); len(got) != reminders.DefaultMaxPerIdentity {
			t.Fatalf("listed %d", len(got))
		}
	})
}

// A periodic reminder fires on schedule with sequence numbers, its
// scheduled time and its payload; after Cancel returns, nothing fires,
// also not a tick that was already in flight.
func TestFiresOnScheduleAndCancelStopsInFlightTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &deliverer{}
		e := newEngine(t, prospero.NewMemStore(), d)
		defer closeEngine(t, e)
		start := time.Now()
		if err := e.RegisterFor(context.Background(), acct, reminders.Reminder{Name: "bill", Period: time.Second,
			Payload: bill{7}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3*time.Second + time.Millisecond)
		got := d.got()
		if len(got) != 3 {
			t.Fatalf("ticks %v, want 3", seqs(got))
		}
		for i, tk := range got {
			if tk.Seq != uint64(i+1) || !tk.Scheduled.Equal(start.Add(time.Duration(i+1)*time.Second)) ||
				tk.Payload != (bill{7}) || tk.Name != "bill" {
				t.Fatalf("tick %d: %+v", i, tk)
			}
		}
		d.mu.Lock()
		d.hold = true
		d.mu.Unlock()
		time.Sleep(time.Second) // tick 4 in flight, held before the actor's turn
		synctest.Wait()
		if err := e.Cancel(context.Background(), acct, "bill"); err != nil {
			t.Fatal(err)
		}
		d.mu.Lock()
		held := d.held
		d.hold = false
		d.mu.Unlock()
		if len(held) != 1 {
			t.Fatalf("%d ticks in flight, want 1", len(held))
		}
		if held[0]() {
			t.Fatal("a tick in flight ran after Cancel returned")
		}
		time.Sleep(5 * time.Second)
		if got := d.got(); len(got) != 3 {
			t.Fatalf("ticks after cancel: %v", seqs(got))
		}
		if err := e.Cancel(context.Background(), acct, "bill"); !errors.Is(err, reminders.ErrNotFound) {
			t.Fatalf("second Cancel: %v", err)
		}
		// A name no reminder can have is refused as such, not looked for.
		for _, name := range []string{"", strings.Repeat("n", reminders.MaxNameBytes+1), "bad\xff"} {
			if err := e.Cancel(context.Background(), acct, name); !errors.Is(err, reminders.ErrBadName) {
				t.Fatalf("Cancel of %.20q: %v, want ErrBadName", name, err)
			}
			if _, err := e.PrepareUnregister(acct, name, nil); !errors.Is(err, reminders.ErrBadName) {
				t.Fatalf("PrepareUnregister of %.20q: %v, want ErrBadName", name, err)
			}
		}
	})
}

// Reminders survive a restart of the engine on the same store, and each
// catch-up policy decides what happens to the occurrences missed while
// it was down.
func TestCatchupAfterRestart(t *testing.T) {
	for _, tc := range []struct {
		pol  reminders.Catchup
		maxN int
		want []uint64 // ticks after the restart, within half a period
	}{
		{reminders.Skip, 0, nil},
		{reminders.FireOnce, 0, []uint64{12}},
		{reminders.FireUpTo, 4, []uint64{9, 10, 11, 12}},
	} {
		t.Run(tc.pol.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := prospero.NewMemStore()
				d := &deliverer{}
				e := newEngine(t, store, d)
				if err := e.RegisterFor(context.Background(), acct, reminders.Reminder{Name: "r", Period: time.Second,
					Catchup: tc.pol, MaxCatchup: tc.maxN}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2*time.Second + 500*time.Millisecond) // ticks 1, 2
				closeEngine(t, e)
				time.Sleep(10 * time.Second) // down over occurrences 3..12
				d2 := &deliverer{}
				e2 := newEngine(t, store, d2)
				defer closeEngine(t, e2)
				time.Sleep(100 * time.Millisecond)
				synctest.Wait()
				if got := seqs(d2.got()); fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Fatalf("after restart: %v, want %v", got, tc.want)
				}
				time.Sleep(time.Second) // back on schedule: occurrence 13
				if got := d2.got(); len(got) != len(tc.want)+1 || got[len(got)-1].Seq != 13 {
					t.Fatalf("then: %v, want ... 13", seqs(got))
				}
				if st := e2.Stats(); st.Reminders != 1 {
					t.Fatalf("stats %+v", st)
				}
			})
		})
	}
}

// Unregister racing a tick: whichever order the tick's turn and the
// cancel take, no tick is accepted by a turn that began after Cancel
// returned. Each tick's turn comes 100 ms after its dispatch (as a
// queued notice's does); the cancel falls between the first tick's
// dispatch and its turn in the first ten rounds, after its turn in the
// others.
func TestCancelRacingTicks(t *testing.T) {
	for round := range 20 {
		synctest.Test(t, func(t *testing.T) {
			d := &lateAcceptor{delay: 100 * time.Millisecond}
			e := newEngine(t, prospero.NewMemStore(), d)
			defer closeEngine(t, e)
			if err := e.RegisterFor(context.Background(), acct, reminders.Reminder{Name: "r", Period: time.Second}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Duration(round)*10*time.Millisecond + time.Millisecond)
			var wg sync.WaitGroup
			wg.Go(func() {
				time.Sleep(time.Second)
				if err := e.Cancel(context.Background(), acct, "r"); err != nil {
					t.Error(err)
				}
				d.cancelled.Store(true)
			})
			wg.Wait()
			time.Sleep(3 * time.Second)
			synctest.Wait()
			if n := d.late.Load(); n != 0 {
				t.Fatalf("%d ticks accepted by turns that began after the cancel returned", n)
			}
			if n := d.accepted.Load(); n > 2 {
				t.Fatalf("%d ticks accepted, want at most 2", n)
			}
		})
	}
}

// lateAcceptor runs each tick's turn delay after its dispatch and counts
// the ticks accepted by turns that began after cancelled was set.
type lateAcceptor struct {
	delay          time.Duration
	cancelled      atomic.Bool
	accepted, late atomic.Int64
}

func (d *lateAcceptor) Deliver(_ actor.Ref, _ reminders.Tick, accept func() bool, _ func(error)) error {
	go func() {
		time.Sleep(d.delay)
		after := d.cancelled.Load()
		if accept() {
			d.accepted.Add(1)
			if after {
				d.late.Add(1)
			}
		}
	}()
	return nil
}

// Shards are loaded when taken over and dropped when they leave: a
// released shard fires nothing here and refuses registrations.
func TestAcquireRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := prospero.NewMemStore()
		d := &deliverer{}
		e := newEngine(t, store, d)
		defer closeEngine(t, e)
		ctx := context.Background()
		if err := e.RegisterFor(ctx, acct, reminders.Reminder{Name: "r", Period: time.Second}); err != nil {
			t.Fatal(err)
		}
		if err := e.Release(ctx, "s0"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		if n := len(d.got()); n != 0 {
			t.Fatalf("a released shard fired %d ticks", n)
		}
		if err := e.RegisterFor(ctx, acct, reminders.Reminder{Name: "r", Period: time.Second}); !errors.Is(err, reminders.ErrNotOwner) {
			t.Fatalf("Register on a released shard: %v", err)
		}
		if err := e.Acquire(ctx, "s0"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if got := seqs(d.got()); fmt.Sprint(got) != "[3]" {
			t.Fatalf("after re-acquire: %v, want [3] (fire-once catch-up)", got)
		}
	})
}

// gatedStore holds every write of a reminder record until open is
// closed.
type gatedStore struct {
	*prospero.MemStore
	open chan struct{}
}

func (g *gatedStore) Put(ctx context.Context, id prospero.Identity, expected uint64, rec prospero.Record) (uint64, error) {
	if id.Kind == reminders.RecordKind && id.Key != "s0" {
		<-g.open
	}
	return g.MemStore.Put(ctx, id, expected, rec)
}

// A release waits for a registration still writing its record and takes
// no new one meanwhile, so that what it leaves at rest (and a handoff
// ships) holds every registration that returned nil.
func TestReleaseWaitsForRegistrationsWriting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &gatedStore{MemStore: prospero.NewMemStore(), open: make(chan struct{})}
		e := newEngine(t, store, &deliverer{})
		defer closeEngine(t, e)
		ctx := context.Background()
		var wg sync.WaitGroup
		var regErr, relErr error
		released := false
		wg.Go(func() { regErr = e.RegisterFor(ctx, acct, reminders.Reminder{Name: "r", Period: time.Minute}) })
		synctest.Wait() // the registration waits on its write
		wg.Go(func() {
			relErr = e.Release(ctx, "s0")
			released = true
		})
		synctest.Wait()
		if released {
			t.Fatal("Release returned while a registration was writing")
		}
		if err := e.RegisterFor(ctx, prospero.Identity{Kind: "acct", Key: "2"}, reminders.Reminder{Name: "r", Period: time.Minute}); !errors.Is(err, reminders.ErrNotOwner) {
			t.Fatalf("Register during a release: %v, want ErrNotOwner", err)
		}
		close(store.open)
		wg.Wait()
		if regErr != nil || relErr != nil {
			t.Fatalf("Register: %v, Release: %v", regErr, relErr)
		}
		// What the release left at rest has the reminder.
		e2 := newEngine(t, store, &deliverer{})
		defer closeEngine(t, e2)
		if infos, err := e2.ListOf(acct); err != nil || len(infos) != 1 {
			t.Fatalf("after the release: %+v, %v", infos, err)
		}
	})
}

// faultyStore fails the writes of reminder records on demand: with fail
// set before they reach the store (a disk that refuses them), with landed
// set after (the write is at rest, yet its caller gets an error, as from
// a replicated store whose replicas did not acknowledge it, or a caller
// whose context ended while the write was queued).
type faultyStore struct {
	*prospero.MemStore
	fail, landed atomic.Bool
}

var errInjected = errors.New("injected store failure")

func (s *faultyStore) fault(id prospero.Identity, write func() error) error {
	if id.Kind != reminders.RecordKind {
		return write()
	}
	if s.fail.Load() {
		return errInjected
	}
	if err := write(); err != nil {
		return err
	}
	if s.landed.Load() {
		return errInjected
	}
	return nil
}

func (s *faultyStore) Put(ctx context.Context, id prospero.Identity, expected uint64, rec prospero.Record) (uint64, error) {
	var v uint64
	err := s.fault(id, func() (err error) {
		v, err = s.MemStore.Put(ctx, id, expected, rec)
		return err
	})
	if err != nil {
		return 0, err
	}
	return v, nil
}

func (s *faultyStore) Delete(ctx context.Context, id prospero.Identity, expected uint64) error {
	return s.fault(id, func() error { return s.MemStore.Delete(ctx, id, expected) })
}

// A release whose writes fail drops nothing: it fails (so a handoff
// ships nothing) and the shard stays held with the changes not at rest,
// which the next release writes. Every registration that returned nil is
// then at rest, as the caller of a failed Cancel or Register was told
// (the reminder as it was stays), although the failed write had landed.
func TestFailedReleaseKeepsWhatIsNotAtRest(t *testing.T) {
	for _, tc := range []struct {
		name string
		// change fails, its write landing; the reminder registered
		// with a period of one minute must stay as it was.
		change func(e *reminders.Engine) error
	}{
		{"cancel", func(e *reminders.Engine) error { return e.Cancel(context.Background(), acct, "r") }},
		{"replace", func(e *reminders.Engine) error {
			return e.RegisterFor(context.Background(), acct, reminders.Reminder{Name: "r", Period: time.Hour})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &faultyStore{MemStore: prospero.NewMemStore()}
			e, err := reminders.New(reminders.Config{Store: store, Codec: codec{}, Deliver: &deliverer{},
				ShardOf: func(prospero.Identity) string { return "s0" }, FlushInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			if err := e.Acquire(ctx, "s0"); err != nil {
				t.Fatal(err)
			}
			defer closeEngine(t, e)
			if err := e.RegisterFor(ctx, acct, reminders.Reminder{Name: "r", Period: time.Minute}); err != nil {
				t.Fatal(err)
			}
			store.landed.Store(true)
			if err := tc.change(e); !errors.Is(err, errInjected) {
				t.Fatalf("%s with its write failing: %v", tc.name, err)
			}
			store.landed.Store(false)
			store.fail.Store(true)
			if err := e.Release(ctx, "s0"); !errors.Is(err, errInjected) {
				t.Fatalf("Release with its writes failing: %v, want the store's error", err)
			}
			// Still held, as before the release: the reminder is listed
			// and registrations are taken.
			if !e.Held("s0") {
				t.Fatal("a failed release dropped the shard")
			}
			if infos, err := e.ListOf(acct); err != nil || len(infos) != 1 || infos[0].Period != time.Minute {
				t.Fatalf("after the failed release: %+v, %v; want r every minute", infos, err)
			}
			store.fail.Store(false)
			if err := e.Release(ctx, "s0"); err != nil {
				t.Fatal(err)
			}
			if e.Held("s0") {
				t.Fatal("the shard is still held after its release")
			}
			// What the release left at rest (what a handoff ships, what
			// Acquire loads) has the acknowledged reminder.
			recs, err := reminders.Records(ctx, store, "s0")
			if err != nil {
				t.Fatal(err)
			}
			var kept int
			for _, r := range recs {
				if r.Key != "s0" {
					kept++
				}
			}
			if kept != 1 {
				t.Fatalf("%d reminder records at rest after the release, want 1", kept)
			}
			e2 := newEngine(t, store.MemStore, &deliverer{})
			defer closeEngine(t, e2)
			if infos, err := e2.ListOf(acct); err != nil || len(infos) != 1 || infos[0].Period != time.Minute {
				t.Fatalf("loaded after the release: %+v, %v; want r every minute", infos, err)
			}
		})
	}
}

// On a store that commits in groups, concurrent cancellations share
// commits as registrations do, rather than a transaction (and an fsync)
// each, and their records are gone.
func TestCancellationsShareCommits(t *testing.T) {
	store, err := prospero.NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	e := newEngine(t, store, &deliverer{})
	defer closeEngine(t, e)
	ctx := t.Context()
	const n = 64
	id := func(i int) prospero.Identity { return prospero.Identity{Kind: "acct", Key: fmt.Sprint(i)} }
	for i := range n {
		if err := e.RegisterFor(ctx, id(i), reminders.Reminder{Name: "r", Period: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	before := store.CommitStats()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = e.Cancel(ctx, id(i), "r") })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	st := store.CommitStats()
	if got := st.Writes - before.Writes; got != n {
		t.Fatalf("%d cancellations queued %d deletions, want one each", n, got)
	}
	if groups := st.Groups - before.Groups; groups >= n {
		t.Fatalf("%d cancellations took %d commits", n, groups)
	}
	recs, err := reminders.Records(ctx, store, "s0")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Key != "s0" {
			t.Fatalf("record %s left after its reminder was cancelled", r.Key)
		}
	}
}

// commit runs Engine.Commit for changes and waits for its done; the
// turn's outcome (Finish) is left to the caller.
func commit(e *reminders.Engine, changes ...reminders.Change) (*reminders.Commit, error) {
	ch := make(chan error, 1)
	c := e.Commit(changes, func(err error) { ch <- err })
	return c, <-ch
}

// reminderRecords counts the records of shard s0's reminders in store
// (not its progress record).
func reminderRecords(store prospero.PrefixScanner) (int, error) {
	recs, err := reminders.Records(context.Background(), store, "s0")
	n := 0
	for _, r := range recs {
		if r.Key != reminders.RecordID("s0").Key {
			n++
		}
	}
	return n, err
}

// A turn's registration is validated when the turn makes it (counting
// what the turn and earlier turns not committed yet registered), is not
// armed until its turn committed as a whole, and a turn that did not
// commit (its state write failed where the reminder's did not) leaves
// nothing registered: not in memory, and not at rest once the periodic
// flush has written the record back.
func TestCommitArmsOnlyACommittedTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := prospero.NewMemStore()
		d := &deliverer{}
		e, err := reminders.New(reminders.Config{Store: store, Codec: codec{}, Deliver: d, MaxPerIdentity: 2,
			ShardOf: func(prospero.Identity) string { return "s0" }})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(); err != nil {
			t.Fatal(err)
		}
		defer closeEngine(t, e)
		if err := e.Acquire(context.Background(), "s0"); err != nil {
			t.Fatal(err)
		}
		r := func(name string) reminders.Reminder { return reminders.Reminder{Name: name, Period: time.Second} }
		a, err := e.PrepareRegister(acct, r("a"), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.PrepareRegister(acct, r("b"), []reminders.Change{a})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.PrepareRegister(acct, r("c"), []reminders.Change{a, b}); !errors.Is(err, reminders.ErrTooMany) {
			t.Fatalf("a third reminder in the turn: %v, want ErrTooMany", err)
		}
		if _, err := e.PrepareUnregister(acct, "c", []reminders.Change{a, b}); !errors.Is(err, reminders.ErrNotFound) {
			t.Fatalf("unregistering what the turn did not register: %v, want ErrNotFound", err)
		}
		c, err := commit(e, a, b)
		if err != nil {
			t.Fatal(err)
		}
		// Written, but the turn's outcome is not known yet: not armed,
		// yet counted for the actor's next turns.
		if got := e.Stats().Reminders; got != 0 {
			t.Fatalf("%d armed before the turn's outcome, want 0", got)
		}
		if _, err := e.PrepareRegister(acct, r("c"), nil); !errors.Is(err, reminders.ErrTooMany) {
			t.Fatalf("a reminder beyond two being committed: %v, want ErrTooMany", err)
		}
		time.Sleep(3 * time.Second)
		if got := d.got(); len(got) != 0 {
			t.Fatalf("ticks of registrations not committed: %v", seqs(got))
		}
		c.Finish(false) // the turn's state was not committed
		if infos, err := e.ListOf(acct); err != nil || len(infos) != 0 || e.Stats().Reminders != 0 {
			t.Fatalf("after a failed turn: %+v, %v, %d armed; want none", infos, err, e.Stats().Reminders)
		}
		if err := e.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n, err := reminderRecords(store); err != nil || n != 0 {
			t.Fatalf("reminder records at rest after a failed turn and a flush: %d, %v; want none", n, err)
		}

		a, err = e.PrepareRegister(acct, r("a"), nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err = commit(e, a)
		if err != nil {
			t.Fatal(err)
		}
		c.Finish(true)
		if infos, err := e.ListOf(acct); err != nil || len(infos) != 1 {
			t.Fatalf("after a committed turn: %+v, %v; want the reminder", infos, err)
		}
		time.Sleep(1500 * time.Millisecond)
		if got := seqs(d.got()); len(got) != 1 || got[0] != 1 {
			t.Fatalf("ticks after the commit: %v, want [1]", got)
		}
	})
}

// A removal is in force from Commit on (no tick of the reminder is
// accepted, also one in flight), and a turn that did not commit puts the
// reminder back, at rest too.
func TestCommitRemovalFailedPutsTheReminderBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := prospero.NewMemStore()
		d := &deliverer{}
		e := newEngine(t, store, d)
		defer closeEngine(t, e)
		if err := e.RegisterFor(context.Background(), acct, reminders.Reminder{Name: "r", Period: time.Second}); err != nil {
			t.Fatal(err)
		}
		d.mu.Lock()
		d.hold = true
		d.mu.Unlock()
		time.Sleep(1500 * time.Millisecond) // tick 1 in flight, held
		rm, err := e.PrepareUnregister(acct, "r", nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := commit(e, rm)
		if err != nil {
			t.Fatal(err)
		}
		d.mu.Lock()
		for _, accept := range d.held {
			if accept() {
				t.Error("a tick in flight was accepted after the removal's Commit")
			}
		}
		d.held, d.hold = nil, false
		d.mu.Unlock()
		c.Finish(false)
		if infos, err := e.ListOf(acct); err != nil || len(infos) != 1 {
			t.Fatalf("after a failed removal: %+v, %v; want the reminder back", infos, err)
		}
		if err := e.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n, err := reminderRecords(store); err != nil || n != 1 {
			t.Fatalf("reminder records at rest after a failed removal and a flush: %d, %v; want the reminder's", n, err)
		}
		time.Sleep(2 * time.Second)
		if len(d.got()) == 0 {
			t.Fatal("the reminder put back does not fire")
		}
	})
}

// dropper fails the first drops ticks handed to it as a scheduler does
// when their actor's activation is refused, and accepts the rest.
type dropper struct {
	deliverer
	drops int
}

func (d *dropper) Deliver(ref actor.Ref, t reminders.Tick, accept func() bool, failed func(error)) error {
	d.mu.Lock()
	drop := d.drops > 0
	if drop {
		d.drops--
	}
	d.mu.Unlock()
	if drop {
		go failed(errors.New("activation refused"))
		return nil
	}
	return d.deliverer.Deliver(ref, t, accept, failed)
}

// A tick that was queued but dropped before its turn (the activation was
// refused) is sent again after RetryAfter with the same sequence number,
// not left in flight until the DeliveryTimeout.
func TestTickDroppedBeforeItsTurnFiresAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &dropper{drops: 2}
		e := newEngine(t, prospero.NewMemStore(), d)
		defer closeEngine(t, e)
		start := time.Now()
		if err := e.RegisterFor(context.Background(), acct, reminders.Reminder{Name: "bill", Period: time.Minute}); err != nil {
			t.Fatal(err)
		}
		// Due at 1 min; dropped twice, each retried a second later.
		time.Sleep(time.Minute + 2*time.Second + time.Millisecond)
		synctest.Wait()
		got := d.got()
		if len(got) != 1 || got[0].Seq != 1 || !got[0].Scheduled.Equal(start.Add(time.Minute)) {
			t.Fatalf("ticks %+v, want seq 1 delivered after two refusals", got)
		}
		if c := e.Stats().Failed; c != 2 {
			t.Fatalf("%d ticks counted failed, want 2", c)
		}
	})
}

// readCounter counts reads of the store.
type readCounter struct {
	*prospero.MemStore
	reads atomic.Int64
}

func (s *readCounter) Get(ctx context.Context, id prospero.Identity) (prospero.Record, error) {
	s.reads.Add(1)
	return s.MemStore.Get(ctx, id)
}

func (s *readCounter) ScanPrefix(ctx context.Context, kind, prefix string) ([]prospero.Keyed, error) {
	s.reads.Add(1)
	return s.MemStore.ScanPrefix(ctx, kind, prefix)
}

// A paused shard stays held without a read or a reload: its ticks stop,
// including one already on its way to the turn, and go on after Resume
// by the catch-up policy.
func TestPauseKeepsTheShardWithoutFiring(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &readCounter{MemStore: prospero.NewMemStore()}
		d := &deliverer{}
		e := newEngine(t, store, d)
		defer closeEngine(t, e)
		ctx := context.Background()
		if err := e.RegisterFor(ctx, acct, reminders.Reminder{Name: "r", Period: time.Second}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond) // tick 1 delivered
		d.mu.Lock()
		d.hold = true
		d.mu.Unlock()
		time.Sleep(time.Second) // tick 2 on its way
		synctest.Wait()
		reads := store.reads.Load()
		if !e.Pause("s0") || !e.Held("s0") {
			t.Fatal("Pause of a held shard")
		}
		if st := e.Stats(); st.Paused != 1 || st.Shards != 1 || st.Reminders != 1 {
			t.Fatalf("stats while paused: %+v", st)
		}
		d.mu.Lock()
		held := d.held
		d.held, d.hold = nil, false
		d.mu.Unlock()
		if len(held) != 1 {
			t.Fatalf("%d ticks on their way, want 1", len(held))
		}
		for _, run := range held {
			if run() {
				t.Fatal("a tick in flight when the shard paused reached its turn")
			}
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := seqs(d.got()); fmt.Sprint(got) != "[1]" {
			t.Fatalf("ticks while paused: %v, want only [1] from before", got)
		}
		if !e.Resume("s0") {
			t.Fatal("Resume of a held shard")
		}
		synctest.Wait()
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		// Occurrences 2..7 were due: fire-once catch-up gives one tick, 7.
		if got := seqs(d.got()); fmt.Sprint(got) != "[1 7]" {
			t.Fatalf("after Resume: %v, want [1 7]", got)
		}
		if n := store.reads.Load() - reads; n != 0 {
			t.Fatalf("pause and resume read the store %d times", n)
		}
		if st := e.Stats(); st.Paused != 0 || st.Failed != 1 {
			t.Fatalf("stats after Resume: %+v (want the cut-off flight failed)", st)
		}
	})
}

// A shard whose records at rest may hold writes that never committed
// (Config.InDoubt: a replicated store's follower, an owner back from a
// kill) has each record written again, as a new version, before any of
// its reminders fires; if those writes fail, the shard is not loaded and
// nothing fires, and a later Acquire tries again.
func TestAcquireWritesRecordsInDoubtBeforeTheyFire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := &faultyStore{MemStore: prospero.NewMemStore()}
		e := newEngine(t, store, &deliverer{})
		for _, name := range []string{"a", "b"} {
			if err := e.RegisterFor(ctx, acct, reminders.Reminder{Name: name, Period: time.Second}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(1500 * time.Millisecond) // a tick each, and their progress at rest
		closeEngine(t, e)
		before, err := store.ScanPrefix(ctx, reminders.RecordKind, "")
		if err != nil || len(before) != 3 { // two reminders and the shard's progress
			t.Fatalf("records at rest: %d, %v; want 3", len(before), err)
		}

		d := &deliverer{}
		e2, err := reminders.New(reminders.Config{Store: store, Codec: codec{}, Deliver: d,
			ShardOf: func(prospero.Identity) string { return "s0" }, InDoubt: func(string) bool { return true }})
		if err != nil {
			t.Fatal(err)
		}
		if err := e2.Start(); err != nil {
			t.Fatal(err)
		}
		defer closeEngine(t, e2)
		store.fail.Store(true)
		if err := e2.Acquire(ctx, "s0"); !errors.Is(err, errInjected) {
			t.Fatalf("Acquire with the writes failing: %v, want the store's error", err)
		}
		time.Sleep(3 * time.Second)
		if got := d.got(); len(got) != 0 || e2.Held("s0") {
			t.Fatalf("a shard whose records could not be written again: held %v, fired %v", e2.Held("s0"), seqs(got))
		}
		store.fail.Store(false)
		if err := e2.Acquire(ctx, "s0"); err != nil {
			t.Fatal(err)
		}
		after, err := store.ScanPrefix(ctx, reminders.RecordKind, "")
		if err != nil || len(after) != len(before) {
			t.Fatalf("records after Acquire: %d, %v", len(after), err)
		}
		for i := range after {
			if after[i].Key != before[i].Key || after[i].Version <= before[i].Version || string(after[i].State) != string(before[i].State) {
				t.Fatalf("record %q after Acquire: version %d (was %d), same state %v; want it written again as it was",
					after[i].Key, after[i].Version, before[i].Version, string(after[i].State) == string(before[i].State))
			}
		}
		if st := e2.Stats(); st.Recommitted != 3 {
			t.Fatalf("Recommitted = %d, want 3", st.Recommitted)
		}
		time.Sleep(time.Second)
		if got := d.got(); len(got) == 0 {
			t.Fatal("the shard's reminders do not fire after it was loaded")
		}
		// Held from then on: writes by the engine go on from the new
		// versions (no conflict).
		if err := e2.RegisterFor(ctx, acct, reminders.Reminder{Name: "a", Period: time.Minute}); err != nil {
			t.Fatal(err)
		}
	})
}

// doneDeliverer is a DoneDeliverer whose turns' outcome the test gives:
// each tick runs its turn at once (accept asked), then done is called
// with fail's value.
type doneDeliverer struct {
	deliverer
	fail error
}

func (d *doneDeliverer) DeliverDone(ref actor.Ref, t reminders.Tick, accept func() bool, done, failed func(error)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !accept() {
		return nil
	}
	d.ticks = append(d.ticks, t)
	done(d.fail)
	return nil
}

// A tick whose turn ran but whose effects were not kept (its state write
// failed, and the actor went back to its state at rest) fires again,
// the same occurrence, after RetryAfter: none is lost to a write that
// did not commit. A tick whose turn's effects were kept is not.
func TestTickWhoseTurnFailedFiresAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &doneDeliverer{fail: errors.New("state not committed")}
		e := newEngine(t, prospero.NewMemStore(), d)
		defer closeEngine(t, e)
		if err := e.RegisterFor(context.Background(), acct, reminders.Reminder{Name: "r", Period: time.Minute}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute + time.Millisecond) // occurrence 1 runs; its turn fails
		synctest.Wait()
		d.mu.Lock()
		d.fail = nil
		d.mu.Unlock()
		time.Sleep(30 * time.Second) // past RetryAfter, before occurrence 2 is due
		synctest.Wait()
		if got := seqs(d.got()); !slices.Equal(got, []uint64{1, 1}) {
			t.Fatalf("ticks %v, want occurrence 1 twice (its first turn failed)", got)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := seqs(d.got()); !slices.Equal(got, []uint64{1, 1, 2}) {
			t.Fatalf("ticks %v, want 1, 1, 2", got)
		}
	})
}
