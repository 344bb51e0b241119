package prospero_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
	"pgregory.net/rapid"
)

// tb is what the harness needs from *testing.T and *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// coreHarness drives a Core step by step and records what it decides.
type coreHarness struct {
	t      tb
	core   *prospero.Core
	events []prospero.Event
	cmds   []prospero.Command
	now    time.Time
}

func newHarness(t tb, cfg prospero.CoreConfig, kinds map[string]prospero.KindOptions) *coreHarness {
	reg := prospero.NewRegistry()
	for name, o := range kinds {
		if _, err := reg.Register(name, o); err != nil {
			t.Fatal(err)
		}
	}
	h := &coreHarness{t: t, now: t0}
	cfg.Sink = prospero.EventFunc(func(e prospero.Event) { h.events = append(h.events, e) })
	h.core = prospero.NewCore(reg, cfg)
	return h
}

func (h *coreHarness) advance(d time.Duration) { h.now = h.now.Add(d) }

// take returns and clears the commands and events decided so far.
func (h *coreHarness) take() ([]prospero.Command, []prospero.Event) {
	cmds := h.core.Drain(nil)
	ev := h.events
	h.events = nil
	return cmds, ev
}

func (h *coreHarness) doorbell(id prospero.Identity) {
	h.t.Helper()
	if err := h.core.Doorbell(id, h.now); err != nil {
		h.t.Fatalf("Doorbell(%s): %v", id, err)
	}
}

// load completes an OpLoad as a shell would, with rec as the store's
// record (zero: none), and returns the incarnation.
func (h *coreHarness) load(c prospero.Command, rec prospero.Record) uint64 {
	h.t.Helper()
	if c.Op != prospero.OpLoad {
		h.t.Fatalf("got %v, want Load", c.Op)
	}
	inc := c.LoadIncarnation(rec)
	h.core.Loaded(c.ID, inc, rec.Version, len(rec.State) > 0, h.now)
	return inc
}

func types(ev []prospero.Event) string {
	var s []string
	for _, e := range ev {
		s = append(s, e.Type.String())
	}
	return strings.Join(s, ",")
}

func ops(cmds []prospero.Command) string {
	var s []string
	for _, c := range cmds {
		s = append(s, c.Op.String()+":"+c.ID.String())
	}
	return strings.Join(s, ",")
}

func (h *coreHarness) expect(wantOps, wantEvents string) []prospero.Command {
	h.t.Helper()
	cmds, ev := h.take()
	if got := ops(cmds); got != wantOps {
		h.t.Fatalf("commands: got %q, want %q", got, wantOps)
	}
	if got := types(ev); got != wantEvents {
		h.t.Fatalf("events: got %q, want %q", got, wantEvents)
	}
	return cmds
}

func (h *coreHarness) status(id prospero.Identity, pinned uint64) prospero.Status {
	h.t.Helper()
	st, atRest, err := h.core.Status(id, pinned)
	if err != nil {
		h.t.Fatal(err)
	}
	if atRest {
		h.t.Fatalf("Status(%s) needs the store", id)
	}
	return st
}

var counterA = prospero.Identity{Kind: "counter", Key: "a"}

func TestCoreUnknownKind(t *testing.T) {
	h := newHarness(t, prospero.CoreConfig{}, nil)
	err := h.core.Doorbell(prospero.Identity{Kind: "nope", Key: "1"}, h.now)
	if !errors.Is(err, actor.ErrUnknownKind) {
		t.Fatalf("got %v, want ErrUnknownKind", err)
	}
	st, _, err := h.core.Status(prospero.Identity{Kind: "nope", Key: "1"}, 0)
	if !errors.Is(err, actor.ErrUnknownKind) || st.State != actor.Unknown {
		t.Fatalf("Status: %+v %v", st, err)
	}
}

func TestCoreActivationOnce(t *testing.T) {
	h := newHarness(t, prospero.CoreConfig{}, map[string]prospero.KindOptions{"counter": {}})
	st, atRest, _ := h.core.Status(counterA, 0)
	if !atRest {
		t.Fatalf("dormant identity answered from memory: %+v", st)
	}
	if got := prospero.StatusAtRest(0, prospero.Record{}, false, false); got.State != actor.Dormant || got.Incarnation != 1 {
		t.Fatalf("never-activated status: %+v", got)
	}
	h.doorbell(counterA)
	h.doorbell(counterA) // a second ring while loading starts nothing
	cmds := h.expect("Load:counter/a", "")
	if inc := h.load(cmds[0], prospero.Record{}); inc != 1 {
		t.Fatalf("first incarnation %d, want 1", inc)
	}
	h.expect("", "Activated")
	h.doorbell(counterA)
	h.expect("", "")
	if st := h.status(counterA, 0); st.State != actor.Valid || st.Incarnation != 1 || !st.Active {
		t.Fatalf("status: %+v", st)
	}
	if st := h.status(counterA, 1); st.State != actor.Valid {
		t.Fatalf("pinned status: %+v", st)
	}
	if st := h.status(counterA, 2); st.State != actor.Unknown {
		t.Fatalf("future incarnation: %+v", st)
	}
}

func TestCoreHydrationBudget(t *testing.T) {
	h := newHarness(t, prospero.CoreConfig{HydrationBudget: 2}, map[string]prospero.KindOptions{"counter": {}})
	for i := range 5 {
		h.doorbell(ident("counter", i))
	}
	cmds := h.expect("Load:counter/0,Load:counter/1", "HydrationQueued,HydrationQueued,HydrationQueued")
	if in, wait := h.core.Hydrating(); in != 2 || wait != 3 {
		t.Fatalf("hydrating %d waiting %d", in, wait)
	}
	h.load(cmds[1], prospero.Record{Version: 9, Incarnation: 4, State: []byte("x")})
	cmds = h.expect("Load:counter/2", "Hydrated")
	h.core.LoadFailed(ident("counter", 0), errors.New("disk"), h.now)
	// The failed load frees its slot for the next in line and retries
	// itself immediately (first restart: no back-off), behind the queue.
	h.expect("Load:counter/3", "StoreError,Fault,Restarting,HydrationQueued")
	if in, wait := h.core.Hydrating(); in != 2 || wait != 2 {
		t.Fatalf("hydrating %d waiting %d", in, wait)
	}
	if st := h.status(ident("counter", 1), 4); st.State != actor.Valid || st.Incarnation != 4 {
		t.Fatalf("hydrated incarnation: %+v", st)
	}
}

func TestCoreIdlePassivation(t *testing.T) {
	kinds := map[string]prospero.KindOptions{
		"counter": {IdleTimeout: time.Minute, Persistence: prospero.Persistence{Mode: prospero.PersistOnPassivation}},
		"cache":   {IdleTimeout: time.Second},
	}
	h := newHarness(t, prospero.CoreConfig{}, kinds)
	cacheA := prospero.Identity{Kind: "cache", Key: "a"}
	h.doorbell(counterA)
	h.doorbell(cacheA)
	for _, c := range h.expect("Load:counter/a,Load:cache/a", "") {
		h.load(c, prospero.Record{})
	}
	h.take()
	h.advance(999 * time.Millisecond)
	h.core.Tick(h.now)
	h.expect("", "")
	if next, ok := h.core.NextDeadline(); !ok || !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("NextDeadline = %v %v", next, ok)
	}
	h.advance(time.Millisecond)
	h.core.Tick(h.now)
	cmds := h.expect("Passivate:cache/a", "Passivating")
	if cmds[0].Persist || cmds[0].Reason != prospero.ReasonIdle {
		t.Fatalf("cache passivation: %+v", cmds[0])
	}
	h.core.Passivated(cacheA, 0, false, h.now)
	h.expect("", "Passivated")
	if h.core.Entries() != 1 {
		t.Fatalf("entries %d after passivation, want 1", h.core.Entries())
	}
	// A turn keeps the counter alive past its original deadline.
	h.advance(30 * time.Second)
	if p, _ := h.core.TurnDone(counterA, 1, h.now); p {
		t.Fatal("OnPassivation kind persisted after a turn")
	}
	h.advance(59 * time.Second)
	h.core.Tick(h.now)
	h.expect("", "")
	h.advance(time.Second)
	h.core.Tick(h.now)
	cmds = h.expect("Passivate:counter/a", "Passivating")
	if !cmds[0].Persist || cmds[0].Incarnation != 1 {
		t.Fatalf("counter passivation: %+v", cmds[0])
	}
	// Mail arriving while passivating brings it straight back.
	h.doorbell(counterA)
	h.core.Passivated(counterA, 5, false, h.now)
	cmds = h.expect("Load:counter/a", "Passivated")
	if inc := h.load(cmds[0], prospero.Record{Version: 5, Incarnation: 1, State: []byte("7")}); inc != 1 {
		t.Fatalf("hydration changed the incarnation to %d", inc)
	}
	h.expect("", "Hydrated")
}

func TestCoreMaxActiveLRU(t *testing.T) {
	h := newHarness(t, prospero.CoreConfig{MaxActive: 3}, map[string]prospero.KindOptions{"counter": {}})
	for i := range 3 {
		h.doorbell(ident("counter", i))
		h.load(h.core.Drain(nil)[0], prospero.Record{})
		h.advance(time.Millisecond)
	}
	h.take()
	h.core.TurnDone(ident("counter", 0), 1, h.now) // 0 is now the most recent; 1 is the oldest
	h.doorbell(ident("counter", 3))
	h.load(h.core.Drain(nil)[0], prospero.Record{})
	cmds := h.expect("Passivate:counter/1", "Activated,Passivating")
	if cmds[0].Reason != prospero.ReasonPressure {
		t.Fatalf("reason %q", cmds[0].Reason)
	}
	if h.core.Active() != 3 {
		t.Fatalf("active %d", h.core.Active())
	}
}

func TestCoreRestartRemintsIdentity(t *testing.T) {
	h := newHarness(t, prospero.CoreConfig{}, map[string]prospero.KindOptions{"counter": {}})
	h.doorbell(counterA)
	h.load(h.core.Drain(nil)[0], prospero.Record{})
	h.take()
	h.core.Fault(prospero.Fault{ID: counterA, Incarnation: 1, Cause: prospero.FaultPanic}, h.now)
	cmds := h.expect("Stop:counter/a", "Fault,Restarting")
	if cmds[0].Remedy != prospero.Restart || cmds[0].Incarnation != 1 {
		t.Fatalf("stop command %+v", cmds[0])
	}
	if st := h.status(counterA, 1); st.State != actor.ActorTerminated {
		t.Fatalf("old incarnation while restarting: %+v", st)
	}
	h.core.Stopped(counterA, h.now)
	cmds = h.expect("Load:counter/a", "")
	if cmds[0].Mint != 2 {
		t.Fatalf("restart mints %d, want 2", cmds[0].Mint)
	}
	// The stored record says 1 (last passivation); the re-mint wins.
	inc := h.load(cmds[0], prospero.Record{Version: 3, Incarnation: 1, State: []byte("s")})
	if inc != 2 {
		t.Fatalf("incarnation %d, want 2", inc)
	}
	h.expect("", "Restarted")
	if st := h.status(counterA, 1); st.State != actor.ActorTerminated || st.Incarnation != 2 {
		t.Fatalf("stale pinned ref: %+v", st)
	}
	if st := h.status(counterA, 0); st.State != actor.Valid || st.Incarnation != 2 {
		t.Fatalf("plain ref: %+v", st)
	}
	// A late fault report of the old incarnation is ignored.
	h.core.Fault(prospero.Fault{ID: counterA, Incarnation: 1}, h.now)
	h.expect("", "")
}

func TestCoreRestartIntensityAndBackoff(t *testing.T) {
	h := newHarness(t, prospero.CoreConfig{}, map[string]prospero.KindOptions{"counter": {}})
	h.doorbell(counterA)
	inc := h.load(h.core.Drain(nil)[0], prospero.Record{})
	h.take()
	fault := func() {
		h.core.Fault(prospero.Fault{ID: counterA, Incarnation: inc, Cause: prospero.FaultBudgetExhausted}, h.now)
	}
	fault()
	h.expect("Stop:counter/a", "Fault,Restarting")
	h.core.Stopped(counterA, h.now)
	cmds := h.expect("Load:counter/a", "")
	inc = h.load(cmds[0], prospero.Record{})
	h.expect("", "Restarted")
	for _, delay := range []time.Duration{10 * time.Millisecond, 20 * time.Millisecond} {
		h.advance(100 * time.Millisecond)
		fault()
		_, ev := h.take()
		if ev[1].Type != prospero.EventRestarting || ev[1].Delay != delay {
			t.Fatalf("restarting event %v, want delay %v", ev[1], delay)
		}
		h.core.Stopped(counterA, h.now)
		h.expect("", "")
		h.advance(delay - time.Nanosecond)
		h.core.Tick(h.now)
		h.expect("", "")
		h.advance(time.Nanosecond)
		h.core.Tick(h.now)
		inc = h.load(h.core.Drain(nil)[0], prospero.Record{})
		h.take()
	}
	if inc != 4 {
		t.Fatalf("incarnation %d after three restarts, want 4", inc)
	}
	h.advance(100 * time.Millisecond)
	fault()
	cmds = h.expect("Retire:counter/a", "Fault,Escalated")
	if cmds[0].Mint != 5 || cmds[0].Incarnation != 4 {
		t.Fatalf("retire command %+v", cmds[0])
	}
	h.core.Retired(counterA, 11, false, h.now)
	h.expect("", "Retired")
	if h.core.Entries() != 0 {
		t.Fatalf("retired identity still has an entry")
	}
	if st := prospero.StatusAtRest(4, prospero.Record{Incarnation: 5}, true, false); st.State != actor.ActorTerminated {
		t.Fatalf("retired incarnation status: %+v", st)
	}
}

func TestCoreHydrateRemedyKeepsIdentity(t *testing.T) {
	h := newHarness(t, prospero.CoreConfig{}, map[string]prospero.KindOptions{"counter": {Remedy: prospero.Hydrate}})
	h.doorbell(counterA)
	h.load(h.core.Drain(nil)[0], prospero.Record{Version: 2, Incarnation: 3, State: []byte("s")})
	h.take()
	h.core.Fault(prospero.Fault{ID: counterA, Incarnation: 3}, h.now)
	cmds := h.expect("Stop:counter/a", "Fault,Restarting")
	if cmds[0].Remedy != prospero.Hydrate {
		t.Fatalf("stop command %+v", cmds[0])
	}
	h.core.Stopped(counterA, h.now)
	cmds = h.expect("Load:counter/a", "")
	if inc := h.load(cmds[0], prospero.Record{Version: 2, Incarnation: 3, State: []byte("s")}); inc != 3 {
		t.Fatalf("Hydrate changed incarnation to %d", inc)
	}
	h.expect("", "Rehydrated")
	if st := h.status(counterA, 3); st.State != actor.Valid {
		t.Fatalf("status after Hydrate remedy: %+v", st)
	}
}

func TestCoreRetireWithMailWaiting(t *testing.T) {
	h := newHarness(t, prospero.CoreConfig{}, map[string]prospero.KindOptions{"counter": {Remedy: prospero.Retire}})
	h.doorbell(counterA)
	h.load(h.core.Drain(nil)[0], prospero.Record{})
	h.take()
	h.core.Fault(prospero.Fault{ID: counterA, Incarnation: 1}, h.now)
	cmds := h.expect("Retire:counter/a", "Fault")
	h.core.Retired(counterA, cmds[0].Version+1, true, h.now)
	cmds = h.expect("Load:counter/a", "Retired")
	if inc := h.load(cmds[0], prospero.Record{Incarnation: 2}); inc != 2 {
		t.Fatalf("activation after retire runs as %d, want 2", inc)
	}
	h.expect("", "Activated")
}

func TestCorePersistencePolicy(t *testing.T) {
	h := newHarness(t, prospero.CoreConfig{}, map[string]prospero.KindOptions{
		"every":  {Persistence: prospero.Persistence{Mode: prospero.PersistEveryTurn}},
		"turns":  {Persistence: prospero.Persistence{Mode: prospero.PersistPeriodic, EveryTurns: 3}},
		"timely": {Persistence: prospero.Persistence{Mode: prospero.PersistPeriodic, Every: time.Second}},
	})
	ids := []prospero.Identity{{Kind: "every", Key: "1"}, {Kind: "turns", Key: "1"}, {Kind: "timely", Key: "1"}}
	for _, id := range ids {
		h.doorbell(id)
		h.load(h.core.Drain(nil)[0], prospero.Record{})
	}
	var got [3][]bool
	for range 4 {
		h.advance(400 * time.Millisecond)
		for i, id := range ids {
			p, v := h.core.TurnDone(id, 1, h.now)
			got[i] = append(got[i], p)
			if p {
				h.core.Persisted(id, 1, v+1, h.now)
			}
		}
	}
	want := [3][]bool{{true, true, true, true}, {false, false, true, false}, {false, false, true, false}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("persist decisions %v, want %v", got, want)
	}
}

func TestCoreShutdown(t *testing.T) {
	h := newHarness(t, prospero.CoreConfig{HydrationBudget: 1}, map[string]prospero.KindOptions{
		"counter": {Persistence: prospero.Persistence{Mode: prospero.PersistOnPassivation}},
	})
	h.doorbell(ident("counter", 0))
	h.load(h.core.Drain(nil)[0], prospero.Record{})
	h.doorbell(ident("counter", 1))
	h.doorbell(ident("counter", 2))
	h.take()
	h.core.Shutdown(h.now)
	cmds, _ := h.take()
	slices.SortFunc(cmds, func(a, b prospero.Command) int { return compareID(a.ID, b.ID) })
	if got := ops(cmds); got != "Passivate:counter/0,Reject:counter/2" {
		t.Fatalf("shutdown commands %q", got)
	}
	if !cmds[0].Persist || cmds[0].Reason != prospero.ReasonShutdown || !errors.Is(cmds[1].Err, prospero.ErrClosed) {
		t.Fatalf("shutdown commands %+v", cmds)
	}
	if err := h.core.Doorbell(ident("counter", 9), h.now); !errors.Is(err, prospero.ErrClosed) {
		t.Fatalf("doorbell after shutdown: %v", err)
	}
	// The load in flight finishes, then the passivations report back.
	h.core.Loaded(ident("counter", 1), 1, 0, false, h.now)
	h.core.Passivated(ident("counter", 0), 1, false, h.now)
	if h.core.Settled() {
		t.Fatal("settled with an activation still attached")
	}
}

// Random interleavings of doorbells, loads, turns, faults, ticks and
// passivations never exceed the active limit or the hydration budget,
// never run two loads of one identity, and never lower an incarnation.
func TestCoreInvariantsProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		maxActive := rapid.IntRange(1, 4).Draw(t, "maxActive")
		budget := rapid.IntRange(1, 3).Draw(t, "budget")
		h := newHarness(t, prospero.CoreConfig{MaxActive: maxActive, HydrationBudget: budget},
			map[string]prospero.KindOptions{"k": {IdleTimeout: 50 * time.Millisecond,
				Remedy: rapid.SampledFrom([]prospero.Remedy{prospero.Restart, prospero.Retire, prospero.Hydrate}).Draw(t, "remedy"),
				// Failed loads escalate to a rejection after two in a row.
				MaxRestarts: 1, RestartPeriod: time.Minute, BackoffInitial: time.Millisecond}})
		loading := map[prospero.Identity]prospero.Command{}
		stopping := map[prospero.Identity]prospero.Command{}  // passivate, retire or stop in flight
		rejecting := map[prospero.Identity]prospero.Command{} // reject issued, not reported yet
		active := map[prospero.Identity]uint64{}
		store := map[prospero.Identity]uint64{} // incarnation at rest
		highest := map[prospero.Identity]uint64{}
		collect := func() {
			for _, c := range h.core.Drain(nil) {
				switch c.Op {
				case prospero.OpLoad:
					if _, dup := loading[c.ID]; dup {
						t.Fatalf("two loads of %s in flight", c.ID)
					}
					if _, on := rejecting[c.ID]; on {
						t.Fatalf("load of %s while the host has not refused its mail yet", c.ID)
					}
					if _, on := active[c.ID]; on {
						t.Fatalf("load of %s while active", c.ID)
					}
					loading[c.ID] = c
				case prospero.OpPassivate, prospero.OpRetire, prospero.OpStop:
					delete(active, c.ID)
					stopping[c.ID] = c
				case prospero.OpReject:
					if _, dup := rejecting[c.ID]; dup {
						t.Fatalf("two rejections of %s in flight", c.ID)
					}
					if _, on := active[c.ID]; on {
						t.Fatalf("rejection of %s while active", c.ID)
					}
					rejecting[c.ID] = c
				}
			}
			if h.core.Active() > maxActive {
				t.Fatalf("%d active > max %d", h.core.Active(), maxActive)
			}
			if in, _ := h.core.Hydrating(); in > budget || len(loading) > budget {
				t.Fatalf("%d hydrations in flight > budget %d", len(loading), budget)
			}
		}
		pick := func(m map[prospero.Identity]prospero.Command) (prospero.Command, bool) {
			keys := make([]prospero.Identity, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			if len(keys) == 0 {
				return prospero.Command{}, false
			}
			slices.SortFunc(keys, compareID)
			return m[rapid.SampledFrom(keys).Draw(t, "which")], true
		}
		for range rapid.IntRange(1, 150).Draw(t, "steps") {
			h.advance(time.Duration(rapid.IntRange(0, 20).Draw(t, "dt")) * time.Millisecond)
			id := ident("k", rapid.IntRange(0, 5).Draw(t, "key"))
			if rapid.IntRange(0, 60).Draw(t, "shutdown") == 0 {
				h.core.Shutdown(h.now)
			}
			switch rapid.IntRange(0, 7).Draw(t, "op") {
			case 0:
				_ = h.core.Doorbell(id, h.now)
			case 1:
				if c, ok := pick(loading); ok {
					delete(loading, c.ID)
					inc := c.LoadIncarnation(prospero.Record{Incarnation: store[c.ID]})
					if inc < highest[c.ID] {
						t.Fatalf("%s incarnation went down from %d to %d", c.ID, highest[c.ID], inc)
					}
					if c.Mint != 0 {
						store[c.ID] = inc
					}
					highest[c.ID] = inc
					h.core.Loaded(c.ID, inc, 0, false, h.now)
					active[c.ID] = inc
				}
			case 2:
				if inc, ok := active[id]; ok {
					h.core.TurnDone(id, inc, h.now)
				}
			case 3:
				if inc, ok := active[id]; ok {
					h.core.Fault(prospero.Fault{ID: id, Incarnation: inc}, h.now)
				}
			case 4:
				h.core.Tick(h.now)
			case 5:
				if c, ok := pick(stopping); ok {
					delete(stopping, c.ID)
					mail := rapid.Bool().Draw(t, "mail")
					if c.Op == prospero.OpStop {
						h.core.Stopped(c.ID, h.now)
					} else if c.Op == prospero.OpRetire {
						store[c.ID] = c.Mint
						h.core.Retired(c.ID, 0, mail, h.now)
					} else {
						store[c.ID] = max(store[c.ID], c.Incarnation)
						h.core.Passivated(c.ID, 0, mail, h.now)
					}
				}
			case 6:
				if c, ok := pick(loading); ok {
					delete(loading, c.ID)
					h.core.LoadFailed(c.ID, errors.New("disk"), h.now)
				}
			case 7:
				if c, ok := pick(rejecting); ok {
					delete(rejecting, c.ID)
					h.core.Rejected(c.ID, c.Err, h.now)
				}
			}
			collect()
			h.events = h.events[:0]
		}
	})
}

// An identity is in memory from its doorbell until it is dormant again,
// in every phase between: a handoff reads its state at rest for shipping
// only once nothing here can change it any more, so "not in memory" must
// not be answered while a load is queued or in flight, after a
// passivation that found mail waiting, or during a back-off.
func TestCoreInMemoryInEveryPhase(t *testing.T) {
	h := newHarness(t, prospero.CoreConfig{HydrationBudget: 1}, map[string]prospero.KindOptions{
		"counter": {Persistence: prospero.Persistence{Mode: prospero.PersistOnPassivation}, BackoffInitial: time.Second},
	})
	other := prospero.Identity{Kind: "counter", Key: "b"}
	in := func(phase string, want bool) {
		t.Helper()
		if got := h.core.InMemory(counterA); got != want {
			t.Fatalf("%s: InMemory %v, want %v", phase, got, want)
		}
		if _, atRest, _ := h.core.Status(counterA, 0); !atRest && !want {
			t.Fatalf("%s: Status answered from memory for an identity not in memory", phase)
		}
	}
	in("dormant", false)
	h.doorbell(other) // takes the only hydration slot
	otherLoad := h.core.Drain(nil)[0]
	h.doorbell(counterA)
	h.expect("", "HydrationQueued")
	in("queued", true)
	h.load(otherLoad, prospero.Record{})
	cmds := h.expect("Load:counter/a", "Activated")
	in("loading", true)
	h.load(cmds[0], prospero.Record{Incarnation: 1, Version: 1})
	h.take()
	in("active", true)
	h.core.Passivate(counterA, h.now)
	cmds = h.expect("Passivate:counter/a", "Passivating")
	if cmds[0].Reason != prospero.ReasonRequested {
		t.Fatalf("a requested passivation's reason: %q, want %q", cmds[0].Reason, prospero.ReasonRequested)
	}
	in("passivating", true)
	// The passivation found mail waiting: a fresh entry (incarnation not
	// known until its record is read) is admitted at once, here behind
	// another activation holding the hydration slot.
	third := prospero.Identity{Kind: "counter", Key: "c"}
	h.doorbell(third)
	thirdLoad := h.core.Drain(nil)[0]
	h.core.Passivated(counterA, cmds[0].Version, true, h.now)
	h.expect("", "Passivated,HydrationQueued")
	in("re-admitted, queued", true)
	h.load(thirdLoad, prospero.Record{})
	h.expect("Load:counter/a", "Activated")
	in("re-admitted, loading", true)
	// A first failed load is retried at once, a second one after a
	// back-off.
	h.core.LoadFailed(counterA, errors.New("disk"), h.now)
	if cmds, _ = h.take(); ops(cmds) != "Load:counter/a" {
		t.Fatalf("after a first failed load: %q, want a load at once", ops(cmds))
	}
	h.core.LoadFailed(counterA, errors.New("disk"), h.now)
	if cmds, _ = h.take(); len(cmds) != 0 {
		t.Fatalf("after a second failed load: %q, want a back-off", ops(cmds))
	}
	in("backing off after a failed load", true)
	h.advance(time.Minute)
	h.core.Tick(h.now)
	cmds = h.expect("Load:counter/a", "")
	h.load(cmds[0], prospero.Record{Incarnation: 1, Version: 1})
	h.core.Passivate(counterA, h.now)
	cmds = h.expect("Passivate:counter/a", "Activated,Passivating")
	h.core.Passivated(counterA, cmds[0].Version, false, h.now)
	in("passivated without mail", false)
}

// A turn that was running when its activation's passivation was decided
// ends while the entry is passivating. Under PersistEveryTurn it still
// persists (its outputs must wait for its own write, not leave ahead of
// the final one), at the version the core knows, without counting as
// activity; under a periodic policy the final write covers it.
func TestCoreTurnEndingWhilePassivating(t *testing.T) {
	h := newHarness(t, prospero.CoreConfig{}, map[string]prospero.KindOptions{
		"every": {Persistence: prospero.Persistence{Mode: prospero.PersistEveryTurn}, IdleTimeout: time.Second},
		"turns": {Persistence: prospero.Persistence{Mode: prospero.PersistPeriodic, EveryTurns: 1}, IdleTimeout: time.Second},
	})
	every, turns := prospero.Identity{Kind: "every", Key: "1"}, prospero.Identity{Kind: "turns", Key: "1"}
	for _, id := range []prospero.Identity{every, turns} {
		h.doorbell(id)
		h.load(h.core.Drain(nil)[0], prospero.Record{Incarnation: 1, Version: 4})
		if !h.core.Passivate(id, h.now) {
			t.Fatalf("%s not passivated", id)
		}
		h.take()
	}
	if p, v := h.core.TurnDone(every, 1, h.now); !p || v != 4 {
		t.Fatalf("every-turn kind, turn ending while passivating: persist %v version %d, want true 4", p, v)
	}
	if p, _ := h.core.TurnDone(every, 2, h.now); p {
		t.Fatal("a turn of another incarnation persists")
	}
	if p, _ := h.core.TurnDone(turns, 1, h.now); p {
		t.Fatal("periodic kind, turn ending while passivating: persists; the final write covers it")
	}
	h.core.Persisted(every, 1, 5, h.now)
	if got := h.core.Active(); got != 0 {
		t.Fatalf("%d identities active after turns of passivating ones: the turns counted as activity", got)
	}
	h.core.Passivated(every, 5, false, h.now)
	h.core.Passivated(turns, 4, false, h.now)
	h.advance(time.Minute)
	h.core.Tick(h.now)
	h.expect("", "Persisted,Passivated,Passivated")
}

// rejectedAfterFailedLoads returns a core whose counterA, of a kind that
// escalates after two failed loads, failed both: the core has just
// issued its OpReject (the commands returned), not reported yet.
func rejectedAfterFailedLoads(t *testing.T) (*coreHarness, []prospero.Command) {
	t.Helper()
	h := newHarness(t, prospero.CoreConfig{}, map[string]prospero.KindOptions{"counter": {MaxRestarts: 1, RestartPeriod: time.Minute}})
	h.doorbell(counterA)
	h.expect("Load:counter/a", "")
	h.core.LoadFailed(counterA, errors.New("disk"), h.now)
	h.expect("Load:counter/a", "StoreError,Fault,Restarting")
	h.core.LoadFailed(counterA, errors.New("disk"), h.now)
	return h, h.expect("Reject:counter/a", "StoreError,Fault,Escalated")
}

// An identity given up on (its load failed past the restart intensity)
// stays in memory until the host reports that it refused the waiting
// mail: a doorbell before that starts no activation, which the host's
// refusal, still to come, would then stop; it is remembered, and once
// the refusal is reported a fresh activation (a fresh restart budget)
// starts for it.
func TestCoreRejectionWaitsForTheHostBeforeANewActivation(t *testing.T) {
	h, cmds := rejectedAfterFailedLoads(t)
	if !h.core.InMemory(counterA) || h.core.Settled() {
		t.Fatal("a rejection not yet carried out left memory")
	}
	h.doorbell(counterA) // mail arrives while the host refuses
	h.expect("", "")
	h.core.Rejected(counterA, cmds[0].Err, h.now)
	cmds = h.expect("Load:counter/a", "Rejected")
	h.load(cmds[0], prospero.Record{})
	h.expect("", "Activated")
	h.core.Passivate(counterA, h.now)
	cmds = h.expect("Passivate:counter/a", "Passivating")
	h.core.Passivated(counterA, cmds[0].Version, false, h.now)
	h.expect("", "Passivated")

	// Without mail meanwhile the entry goes; at shutdown a rejected
	// activation keeps the core unsettled until the host reports it.
	h.doorbell(counterA)
	h.expect("Load:counter/a", "")
	h.core.Shutdown(h.now)
	h.core.LoadFailed(counterA, errors.New("disk"), h.now)
	cmds = h.expect("Reject:counter/a", "StoreError,Fault,Restarting")
	if h.core.Settled() {
		t.Fatal("settled before the host refused the waiting mail")
	}
	// Closing: mail now is refused at once, not remembered.
	if err := h.core.Doorbell(counterA, h.now); !errors.Is(err, prospero.ErrClosed) {
		t.Fatalf("doorbell while rejecting during shutdown: %v, want ErrClosed", err)
	}
	h.core.Rejected(counterA, cmds[0].Err, h.now)
	h.expect("", "Rejected")
	if !h.core.Settled() || h.core.InMemory(counterA) {
		t.Fatal("not settled once the rejection was carried out")
	}
}

// Mail that rang while an identity was being rejected, before a
// shutdown began, is refused in turn once the rejection is reported:
// nothing would activate it any more.
func TestCoreMailDuringARejectionIsRefusedAtShutdown(t *testing.T) {
	h, cmds := rejectedAfterFailedLoads(t)
	h.doorbell(counterA)
	h.core.Shutdown(h.now)
	h.expect("", "")
	h.core.Rejected(counterA, cmds[0].Err, h.now)
	cmds = h.expect("Reject:counter/a", "Rejected")
	if !errors.Is(cmds[0].Err, prospero.ErrClosed) || h.core.Settled() {
		t.Fatalf("second rejection %+v, settled %v", cmds[0], h.core.Settled())
	}
	h.core.Rejected(counterA, cmds[0].Err, h.now)
	h.expect("", "Rejected")
	if !h.core.Settled() {
		t.Fatal("not settled")
	}
}
