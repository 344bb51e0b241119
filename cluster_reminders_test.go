package tempest_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/federation"
	"github.com/tempest-actors/tempest/reminders"
	"github.com/tempest-actors/tempest/tempesttest"
)

// nodeTicks records which node delivered each tick, and when, by actor
// key.
type nodeTicks struct {
	mu sync.Mutex
	by map[string][]string    // key → node of each tick, in order
	at map[string][]time.Time // key → when each tick ran
}

func (l *nodeTicks) add(key, node string) {
	l.mu.Lock()
	l.by[key] = append(l.by[key], node)
	if l.at == nil {
		l.at = map[string][]time.Time{}
	}
	l.at[key] = append(l.at[key], time.Now())
	l.mu.Unlock()
}

// firstOn returns when key first ticked on a node other than not at or
// after from (false: it did not).
func (l *nodeTicks) firstOn(key, not string, from time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, n := range l.by[key] {
		if n != not && !l.at[key][i].Before(from) {
			return l.at[key][i], true
		}
	}
	return time.Time{}, false
}

func (l *nodeTicks) count(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.by[key])
}

func (l *nodeTicks) lastNode(key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.by[key]; len(s) > 0 {
		return s[len(s)-1]
	}
	return ""
}

type clusterBiller struct {
	biller
	node, key string
	ticks     *nodeTicks
}

// startBilling makes a clusterBiller register a reminder ticking every
// second; it is a declared message, so it may come from any node.
type startBilling struct{}

var startBillingMsg = tempest.CodecOf(0xBEEF01, "StartBilling",
	func(dst []byte, _ startBilling) ([]byte, error) { return dst, nil },
	func(b []byte) (startBilling, error) {
		if len(b) != 0 {
			return startBilling{}, errors.New("StartBilling has no body")
		}
		return startBilling{}, nil
	})

func (b *clusterBiller) Receive(ctx actor.Context, msg any) {
	switch msg.(type) {
	case reminders.Tick:
		b.ticks.add(b.key, b.node)
	case startBilling:
		if err := b.rem.Register(ctx, reminders.Reminder{Name: "r", Period: time.Second}); err != nil {
			ctx.ReplyError(err)
			return
		}
		ctx.Reply(startBilling{})
	}
}

// Reminders fire on whichever node owns their identity: they keep firing
// after their owner left (its shards handed off with their reminders)
// and after the whole cluster stopped and started again.
func TestClusterRemindersFollowTheirShard(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	ticks := &nodeTicks{by: map[string][]string{}}
	c := demoCluster(t, tempesttest.Options{Nodes: 3, Register: func(n *tempest.Node) error {
		rem, name := n.Reminders(), n.Name()
		return n.Register("biller", func(key string) actor.Actor {
			return &clusterBiller{biller: biller{rem: rem}, node: name, key: key, ticks: ticks}
		}, tempest.KindOptions{KindOptions: prospero.KindOptions{IdleTimeout: 500 * time.Millisecond},
			Messages: []tempest.Message{startBillingMsg}, Reminders: true})
	}})
	n1 := c.Node("n1")
	var keys, onN3 []string
	for k := 0; len(onN3) < 3 && k < 200; k++ {
		key := fmt.Sprintf("b%d", k)
		owner, _, err := n1.Locate(n1.Ref("biller", key))
		if err != nil {
			t.Fatal(err)
		}
		if owner == "n3" {
			onN3 = append(onN3, key)
		}
		if owner == "n3" || len(keys) < 6 {
			keys = append(keys, key)
		}
	}
	for _, key := range keys {
		if _, err := n1.Ask(context.Background(), n1.Ref("biller", key), startBilling{}); err != nil {
			t.Fatalf("start billing %s: %v", key, err)
		}
	}
	allTick := func(when string, since map[string]int, notOn string) {
		t.Helper()
		why := ""
		waitFor(t, 20*time.Second, when, func() bool {
			for _, key := range keys {
				if ticks.count(key) < since[key]+2 {
					why = fmt.Sprintf("%s: %d ticks", key, ticks.count(key))
					return false
				}
				if notOn != "" && ticks.lastNode(key) == notOn {
					why = fmt.Sprintf("%s last ticked on %s", key, notOn)
					return false
				}
			}
			return true
		}, &why)
	}
	snapshot := func() map[string]int {
		m := map[string]int{}
		for _, key := range keys {
			m[key] = ticks.count(key)
		}
		return m
	}
	allTick("every reminder ticking", snapshot(), "")
	for _, key := range onN3 {
		if got := ticks.lastNode(key); got != "n3" {
			t.Fatalf("%s (owned by n3) ticked on %s", key, got)
		}
	}

	if err := c.Close("n3"); err != nil {
		t.Fatalf("graceful close of n3: %v", err)
	}
	c.WaitSettled()
	allTick("reminders of n3's shards ticking on their new owners", snapshot(), "n3")

	c.KillAll()
	for _, name := range []string{"n1", "n2"} {
		c.Start(name)
	}
	c.WaitSettled()
	allTick("reminders ticking after a full restart", snapshot(), "")
}

// After its owner crashes, a reminder fires on the new owner of its
// shard within failover time plus one period: the shard's reminder
// record is replicated with the shard's state, so the node that takes
// the shard over holds it although it never saw the registration and the
// crashed node's disk is gone with it. Failover time is measured, from
// the kill to a survivor's table naming another owner; the first tick on
// the new owner must follow it within the period (1 s) and a grace of
// 2 s for the engine's reminder loop (it looks at the table every
// 250 ms) and the actor's hydration on a loaded machine.
func TestClusterRemindersSurviveOwnerCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	ticks := &nodeTicks{by: map[string][]string{}}
	c := demoCluster(t, tempesttest.Options{Nodes: 3, Register: func(n *tempest.Node) error {
		rem, name := n.Reminders(), n.Name()
		return n.Register("biller", func(key string) actor.Actor {
			return &clusterBiller{biller: biller{rem: rem}, node: name, key: key, ticks: ticks}
		}, tempest.KindOptions{Messages: []tempest.Message{startBillingMsg}, Reminders: true})
	}})
	n1 := c.Node("n1")
	// The victim is not the raft leader: failover of placement itself is
	// another test's subject.
	leader := n1.Leader()
	var victim string
	for _, n := range c.Nodes() {
		if n.Name() != leader {
			victim = n.Name()
			break
		}
	}
	var keys []string
	for k := 0; len(keys) < 3 && k < 500; k++ {
		key := fmt.Sprintf("b%d", k)
		if owner, _, err := n1.Locate(n1.Ref("biller", key)); err == nil && owner == victim {
			keys = append(keys, key)
		}
	}
	if len(keys) < 3 {
		t.Fatalf("only %d keys on %s", len(keys), victim)
	}
	for _, key := range keys {
		if _, err := n1.Ask(context.Background(), n1.Ref("biller", key), startBilling{}); err != nil {
			t.Fatalf("start billing %s: %v", key, err)
		}
	}
	// The registrations are acknowledged; let each tick on the victim once.
	waitFor(t, 20*time.Second, "ticks on the owner", func() bool {
		for _, key := range keys {
			if ticks.count(key) == 0 {
				return false
			}
		}
		return true
	})
	for _, key := range keys {
		if got := ticks.lastNode(key); got != victim {
			t.Fatalf("%s ticked on %s, not its owner %s", key, got, victim)
		}
	}
	if st := c.Node(victim).ReplicationStats(); st.Records == 0 {
		t.Fatalf("the owner replicated no record: %+v", st)
	}
	var survivor *tempest.Node
	for _, n := range c.Nodes() {
		if n.Name() != victim {
			survivor = n
			break
		}
	}
	killed := time.Now()
	c.Kill(victim)
	failedOver := map[string]time.Time{} // key → when a survivor's table first named another owner
	waitFor(t, 45*time.Second, "the victim's shards owned by a survivor", func() bool {
		for _, key := range keys {
			if _, ok := failedOver[key]; ok {
				continue
			}
			if owner, _, err := survivor.Locate(survivor.Ref("biller", key)); err == nil && owner != victim {
				failedOver[key] = time.Now()
			}
		}
		return len(failedOver) == len(keys)
	})
	why := ""
	waitFor(t, 45*time.Second, "every reminder ticking on a survivor", func() bool {
		for _, key := range keys {
			if n := ticks.lastNode(key); n == victim || n == "" {
				why = fmt.Sprintf("%s last ticked on %s", key, n)
				return false
			}
		}
		return true
	}, &why)
	// The new owners loaded the reminders from their own stores, as
	// followers: records that may hold writes that never committed, so
	// each was written again before it fired.
	var recommitted uint64
	for _, n := range c.Nodes() {
		if n.Name() != victim {
			recommitted += n.Reminders().Stats().Recommitted
		}
	}
	if recommitted < uint64(len(keys)) {
		t.Errorf("the new owners wrote again %d reminder records before firing them, want at least %d", recommitted, len(keys))
	}
	const period, grace = time.Second, 2 * time.Second
	for _, key := range keys {
		first, ok := ticks.firstOn(key, victim, killed)
		if !ok {
			t.Fatalf("%s: no tick on a survivor", key)
		}
		failover := failedOver[key].Sub(killed)
		t.Logf("%s: failover %v, first tick on the new owner %v after the kill", key, failover.Round(time.Millisecond), first.Sub(killed).Round(time.Millisecond))
		if first.After(failedOver[key].Add(period + grace)) {
			t.Errorf("%s: first tick on the new owner %v after the kill, failover took %v: later than failover plus one period (and %v)",
				key, first.Sub(killed), failover, grace)
		}
	}
}

// A reminder is listed and cancelled through Reminders.ListOf and Cancel
// from every node, the owner local or remote, with the same result and
// the same error identity: the owner answers over the federation
// protocol for a node that does not own the identity.
func TestClusterReminderListAndCancelFromAnyNode(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	ticks := &nodeTicks{by: map[string][]string{}}
	c := tempesttest.New(t, tempesttest.Options{Nodes: 3, Register: func(n *tempest.Node) error {
		rem, name := n.Reminders(), n.Name()
		return n.Register("biller", func(key string) actor.Actor {
			return &clusterBiller{biller: biller{rem: rem}, node: name, key: key, ticks: ticks}
		}, tempest.KindOptions{Messages: []tempest.Message{startBillingMsg}, Reminders: true})
	}})
	names := []string{"n1", "n2", "n3"}
	n1 := c.Node("n1")
	ref := n1.Ref("biller", "listed")
	owner := c.Owner(ref).Name()
	if _, err := n1.Ask(context.Background(), ref, startBilling{}); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	want, err := c.Node(owner).Reminders().ListOf(ctx, ref)
	if err != nil || want.Node != owner || len(want.Reminders) != 1 || want.Reminders[0].Name != "r" ||
		want.Reminders[0].Period != time.Second {
		t.Fatalf("on the owner %s: %+v, %v", owner, want, err)
	}
	same := func(a, b reminders.Info) bool {
		return a.ID == b.ID && a.Name == b.Name && a.Due.Equal(b.Due) && a.Period == b.Period && a.Catchup == b.Catchup &&
			a.MaxCatchup == b.MaxCatchup && a.PayloadType == b.PayloadType
	}
	for _, name := range names {
		got, err := c.Node(name).Reminders().ListOf(ctx, ref)
		if err != nil || got.Node != owner || len(got.Reminders) != 1 || !same(got.Reminders[0], want.Reminders[0]) {
			t.Errorf("through %s: %+v, %v; the owner %s has %+v", name, got, err, owner, want)
		}
	}
	// The same errors everywhere, text included: an unknown reminder, an
	// unknown kind, an invalid key.
	ownerText := fmt.Sprint(c.Node(owner).Reminders().Cancel(ctx, ref, "nope"))
	for _, name := range names {
		rem := c.Node(name).Reminders()
		if err := rem.Cancel(ctx, ref, "nope"); !errors.Is(err, reminders.ErrNotFound) || err.Error() != ownerText {
			t.Errorf("cancel of an unknown reminder through %s: %v, want ErrNotFound reading %q as on the owner", name, err, ownerText)
		}
		if _, err := rem.ListOf(ctx, n1.Ref("nokind", "k")); !errors.Is(err, actor.ErrUnknownKind) {
			t.Errorf("list of an unknown kind through %s: %v", name, err)
		}
		if _, err := rem.ListOf(ctx, n1.Ref("biller", "")); !errors.Is(err, tempest.ErrInvalidKey) {
			t.Errorf("list of an empty key through %s: %v", name, err)
		}
	}
	// Cancelled through a node that does not own it: gone on the owner,
	// and a second cancel through any node is ErrNotFound.
	var other string
	for _, name := range names {
		if name != owner {
			other = name
			break
		}
	}
	if err := c.Node(other).Reminders().Cancel(ctx, ref, "r"); err != nil {
		t.Fatalf("cancel through %s: %v", other, err)
	}
	for _, name := range names {
		got, err := c.Node(name).Reminders().ListOf(ctx, ref)
		if err != nil || got.Node != owner || len(got.Reminders) != 0 {
			t.Errorf("after the cancel, through %s: %+v, %v", name, got, err)
		}
		if err := c.Node(name).Reminders().Cancel(ctx, ref, "r"); !errors.Is(err, reminders.ErrNotFound) {
			t.Errorf("second cancel through %s: %v, want ErrNotFound", name, err)
		}
	}
	if st := c.Node(owner).FederationStats(); st.Answered[federation.CodeNoReminder] == 0 {
		t.Errorf("the owner answered no NO_REMINDER: %+v", st)
	}
}

// seqLog records, in order, the sequence number of every tick of each
// reminder.
type seqLog struct {
	mu  sync.Mutex
	by  map[string][]uint64
	all int
}

func (l *seqLog) add(name string, seq uint64) {
	l.mu.Lock()
	l.by[name] = append(l.by[name], seq)
	l.all++
	l.mu.Unlock()
}

// mark returns how many ticks each reminder had.
func (l *seqLog) mark() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := map[string]int{}
	for n, s := range l.by {
		m[n] = len(s)
	}
	return m
}

// since returns the sequence numbers of name's ticks after mark m.
func (l *seqLog) since(m map[string]int, name string) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]uint64(nil), l.by[name][m[name]:]...)
}

type seqTicker struct{ log *seqLog }

func (a *seqTicker) Receive(_ actor.Context, msg any) {
	if t, ok := msg.(reminders.Tick); ok {
		a.log.add(t.Name, t.Seq)
	}
}

// Each catch-up policy after the whole cluster was stopped (kill -9 of
// every node) for several periods: three reminders of one identity on
// one schedule, one per policy, are loaded together by the shard's
// owner after the restart, so they see the same missed occurrences. The
// newest one due (M) is FireOnce's one tick; Skip resumes with M+1;
// FireUpTo 3 fires M-2, M-1 and M, then M+1. All of them skip the
// occurrences before those, due while the cluster was down.
func TestClusterRemindersCatchUpAfterClusterStop(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	log := &seqLog{by: map[string][]uint64{}}
	c := demoCluster(t, tempesttest.Options{Nodes: 3, Register: func(n *tempest.Node) error {
		return n.Register("pol", func(string) actor.Actor { return &seqTicker{log: log} },
			tempest.KindOptions{KindOptions: prospero.KindOptions{IdleTimeout: time.Minute}})
	}})
	n1 := c.Node("n1")
	ref := n1.Ref("pol", "p")
	owner, _, err := n1.Locate(ref)
	if err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(2 * time.Second).Truncate(time.Second)
	for _, r := range []reminders.Reminder{
		{Name: "skip", Due: due, Period: time.Second, Catchup: reminders.Skip},
		{Name: "once", Due: due, Period: time.Second, Catchup: reminders.FireOnce},
		{Name: "upto", Due: due, Period: time.Second, Catchup: reminders.FireUpTo, MaxCatchup: 3},
	} {
		if err := tempest.RegisterReminderOn(context.Background(), c.Node(owner), ref, r); err != nil {
			t.Fatalf("register %s on %s: %v", r.Name, owner, err)
		}
	}
	waitFor(t, 20*time.Second, "three ticks of each", func() bool {
		m := log.mark()
		return m["skip"] >= 3 && m["once"] >= 3 && m["upto"] >= 3
	})
	c.KillAll()
	stopped := log.mark()
	last := map[string]uint64{}
	for _, name := range []string{"skip", "once", "upto"} {
		s := log.since(map[string]int{}, name)
		last[name] = s[len(s)-1]
	}
	time.Sleep(6 * time.Second) // down over at least six occurrences: the test's subject
	for _, name := range []string{"n1", "n2"} {
		c.Start(name)
	}
	c.WaitSettled()
	why := ""
	waitFor(t, 30*time.Second, "ticks of each after the restart", func() bool {
		why = fmt.Sprint(log.since(stopped, "skip"), log.since(stopped, "once"), log.since(stopped, "upto"))
		return len(log.since(stopped, "skip")) >= 2 && len(log.since(stopped, "once")) >= 2 && len(log.since(stopped, "upto")) >= 4
	}, &why)
	skip, once, upto := log.since(stopped, "skip"), log.since(stopped, "once"), log.since(stopped, "upto")
	t.Logf("last before the stop %v; after the restart: skip %v, once %v, upto %v", last, skip, once, upto)
	m := once[0] // the newest occurrence due when the shard was loaded
	if m < last["once"]+3 {
		t.Fatalf("FireOnce fired %d first after the restart, its last before the stop was %d: no occurrence was skipped", m, last["once"])
	}
	if once[1] != m+1 {
		t.Errorf("FireOnce after the restart: %v, want one catch-up tick then the schedule (%d, %d)", once, m, m+1)
	}
	if skip[0] != m+1 || skip[1] != m+2 {
		t.Errorf("Skip after the restart: %v, want no catch-up tick: %d, %d", skip, m+1, m+2)
	}
	if fmt.Sprint(upto[:4]) != fmt.Sprint([]uint64{m - 2, m - 1, m, m + 1}) {
		t.Errorf("FireUpTo 3 after the restart: %v, want %d %d %d then %d", upto, m-2, m-1, m, m+1)
	}
}

// setPeriod makes a periodBiller register its reminder "r" with the
// period it carries (replacing the one registered before, if any).
type setPeriod struct{ d time.Duration }

var setPeriodMsg = tempest.CodecOf(0xBEEF02, "SetPeriod",
	func(dst []byte, m setPeriod) ([]byte, error) { return binary.AppendVarint(dst, int64(m.d)), nil },
	func(b []byte) (setPeriod, error) {
		d, n := binary.Varint(b)
		if n <= 0 || n != len(b) {
			return setPeriod{}, errors.New("SetPeriod: bad body")
		}
		return setPeriod{time.Duration(d)}, nil
	})

type periodBiller struct{ rem *tempest.Reminders }

func (b *periodBiller) Receive(ctx actor.Context, msg any) {
	if m, ok := msg.(setPeriod); ok {
		if err := b.rem.Register(ctx, reminders.Reminder{Name: "r", Period: m.d}); err != nil {
			ctx.ReplyError(err)
			return
		}
		ctx.Reply(m)
	}
}

// periodBillers starts three nodes hosting periodBiller as "biller",
// with replicas off: a planned move ships the shard's state (no
// follower holds it to be promoted).
func periodBillers(t *testing.T) *tempesttest.Cluster {
	t.Helper()
	return tempesttest.New(t, tempesttest.Options{Nodes: 3, Configure: func(_ string, cfg *tempest.Config) {
		cfg.Cluster.Placement.Replicas = 1
	}, Register: func(n *tempest.Node) error {
		rem := n.Reminders()
		return n.Register("biller", func(string) actor.Actor { return &periodBiller{rem: rem} },
			tempest.KindOptions{Messages: []tempest.Message{setPeriodMsg}, Reminders: true})
	}})
}

// periodBillerOffLeader returns a biller key, and its location, owned by
// a node that is not the raft leader by via's table: that node's
// graceful leave is a handoff of its shards, not also a change of
// leader.
func periodBillerOffLeader(t *testing.T, via *tempest.Node) (string, placement.Location) {
	t.Helper()
	leader := via.Leader()
	for k := range 500 {
		key := fmt.Sprintf("p%d", k)
		if l, err := via.Table().Locate("biller", key); err == nil && !l.Moving && l.Owner != leader {
			return key, l
		}
	}
	t.Fatal("no biller key owned by a node other than the leader")
	return "", placement.Location{}
}

// A reminder record a handoff brought is stored at the old owner's
// (epoch, version), as a replica of the old owner would store it and
// as the handoff's actor records are: an older copy of it that reaches
// the new owner afterwards (a catch-up of the new owner as the old
// owner's replica may have read it before the handoff; accepted under
// the old epoch, it is written after the handoff's records) loses, and a
// later record of the old owner's (its writes once a move is aborted,
// at the epoch the abort raised) wins. The new owner used to store the handoff's reminder records at a
// version of its own sequence, so that which of the two copies won
// depended on how many writes each store had seen: an older copy won
// where no copy had reached the new owner before (by epoch), the old
// owner's next version lost where one had. Here the older copy is the
// reminder's first registration, replaced before the handoff. Replicas
// are off, so the shard's state is shipped, not promoted.
func TestClusterHandedOffReminderRecordAtTheOldOwnersVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := periodBillers(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	n1 := c.Node("n1")
	key, loc := periodBillerOffLeader(t, n1)
	oldOwner := loc.Owner
	ref := n1.Ref("biller", key)
	recID := reminders.ReminderID(tempest.ReminderShardKey(loc.Shard),
		reminders.Key{ID: prospero.Identity{Kind: "biller", Key: key}, Name: "r"})
	old := c.Node(oldOwner)

	if _, err := n1.Ask(ctx, ref, setPeriod{time.Hour}); err != nil {
		t.Fatalf("register: %v", err)
	}
	first, err := tempest.StoredState(ctx, old, recID)
	if err != nil {
		t.Fatalf("the reminder's record on its owner %s: %v", oldOwner, err)
	}
	if _, err := n1.Ask(ctx, ref, setPeriod{2 * time.Hour}); err != nil {
		t.Fatalf("register again: %v", err)
	}
	shipped, err := tempest.StoredState(ctx, old, recID)
	if err != nil || shipped.Version <= first.Version || string(shipped.State) == string(first.State) {
		t.Fatalf("the record after registering again: %+v, %v (first %+v)", shipped, err, first)
	}
	if l, err := n1.Table().Locate("biller", key); err != nil || l.Epoch != loc.Epoch || l.Owner != oldOwner {
		t.Fatalf("the shard moved meanwhile: %+v, %v (was %+v)", l, err, loc)
	}

	if err := c.Close(oldOwner); err != nil {
		t.Fatalf("graceful close of %s: %v", oldOwner, err)
	}
	c.WaitSettled()
	owner := c.Owner(ref)
	if owner.Name() == oldOwner {
		t.Fatalf("%s still owns %s after leaving", oldOwner, loc.Shard)
	}
	got, err := tempest.StoredState(ctx, owner, recID)
	if err != nil || string(got.State) != string(shipped.State) {
		t.Fatalf("the new owner %s stores %+v, %v; the old owner shipped %+v", owner.Name(), got, err, shipped)
	}
	epoch, version, err := tempest.StoredAt(ctx, owner, recID)
	if err != nil || epoch != loc.Epoch || version != shipped.Version {
		t.Errorf("the new owner %s stores the handed-off record at (epoch %d, version %d), %v; want the old owner's (%d, %d)",
			owner.Name(), epoch, version, err, loc.Epoch, shipped.Version)
	}

	// The first registration's copy, at the old owner's epoch and the
	// version it had there: older, it is not stored.
	if n, err := tempest.ApplyReplicaCopy(owner, []prospero.Replicated{{ID: recID, Epoch: loc.Epoch,
		Version: first.Version, Incarnation: first.Incarnation, State: first.State}}); err != nil || n != 0 {
		t.Errorf("an older copy (epoch %d, version %d) after the handoff: applied %d, %v; want none", loc.Epoch, first.Version, n, err)
	}
	if got, err := tempest.StoredState(ctx, owner, recID); err != nil || string(got.State) != string(shipped.State) {
		t.Errorf("after an older copy the new owner %s stores %+v, %v; the old owner shipped %+v", owner.Name(), got, err, shipped)
	}
	// The old owner's next version of it is newer.
	next := []byte("the old owner's next write")
	if n, err := tempest.ApplyReplicaCopy(owner, []prospero.Replicated{{ID: recID, Epoch: loc.Epoch,
		Version: shipped.Version + 1, State: next}}); err != nil || n != 1 {
		t.Errorf("the old owner's next version (epoch %d, version %d): applied %d, %v; want it stored", loc.Epoch, shipped.Version+1, n, err)
	}
	if got, err := tempest.StoredState(ctx, owner, recID); err != nil || string(got.State) != string(next) {
		t.Errorf("after the old owner's next version the new owner %s stores %+v, %v", owner.Name(), got, err)
	}
}

// A handoff of a shard with more reminder records than one transaction
// of the new owner's holds (512) brings every one of them, each at the
// old owner's version: the records are stored in several batches, in
// the order they arrived, each counted only once stored.
func TestClusterHandoffOfManyReminders(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := periodBillers(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	n1 := c.Node("n1")
	first, loc := periodBillerOffLeader(t, n1)
	keys := []string{first}
	tab := n1.Table()
	for k := 0; len(keys) < 700 && k < 100000; k++ {
		key := fmt.Sprintf("many%d", k)
		if l, err := tab.Locate("biller", key); err == nil && l.Shard == loc.Shard {
			keys = append(keys, key)
		}
	}
	if len(keys) < 700 {
		t.Fatalf("only %d keys in %s", len(keys), loc.Shard)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(keys))
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(keys); i += 16 {
				if _, err := n1.Ask(ctx, n1.Ref("biller", keys[i]), setPeriod{time.Hour}); err != nil {
					errs <- fmt.Errorf("register %s: %w", keys[i], err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	old := c.Node(loc.Owner)
	shard := tempest.ReminderShardKey(loc.Shard)
	ids := make([]prospero.Identity, len(keys))
	want := make([]prospero.Record, len(keys))
	for i, key := range keys {
		ids[i] = reminders.ReminderID(shard, reminders.Key{ID: prospero.Identity{Kind: "biller", Key: key}, Name: "r"})
		rec, err := tempest.StoredState(ctx, old, ids[i])
		if err != nil {
			t.Fatalf("the record of %s on its owner %s: %v", key, loc.Owner, err)
		}
		want[i] = rec
	}
	if l, err := n1.Table().Locate("biller", first); err != nil || l.Epoch != loc.Epoch || l.Owner != loc.Owner {
		t.Fatalf("the shard moved meanwhile: %+v, %v (was %+v)", l, err, loc)
	}

	if err := c.Close(loc.Owner); err != nil {
		t.Fatalf("graceful close of %s: %v", loc.Owner, err)
	}
	c.WaitSettled()
	owner := c.Owner(n1.Ref("biller", first))
	if owner.Name() == loc.Owner {
		t.Fatalf("%s still owns %s after leaving", loc.Owner, loc.Shard)
	}
	missing := 0
	for i, id := range ids {
		got, err := tempest.StoredState(ctx, owner, id)
		epoch, version, aerr := tempest.StoredAt(ctx, owner, id)
		if err != nil || aerr != nil || string(got.State) != string(want[i].State) || epoch != loc.Epoch || version != want[i].Version {
			if missing++; missing <= 5 {
				t.Errorf("the record of %s on the new owner %s: %+v at (epoch %d, version %d), %v, %v; the old owner held %+v at epoch %d",
					keys[i], owner.Name(), got, epoch, version, err, aerr, want[i], loc.Epoch)
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d reminder records not brought as the old owner held them", missing, len(ids))
	}
	list, err := owner.Reminders().ListOf(ctx, n1.Ref("biller", keys[len(keys)-1]))
	if err != nil || list.Node != owner.Name() || len(list.Reminders) != 1 || list.Reminders[0].Period != time.Hour {
		t.Errorf("the last key's reminders on the new owner: %+v, %v", list, err)
	}
}

// refuseReminder makes a refuser attempt the reminder operation of its
// case, which the engine refuses, and reply the error.
type refuseReminder struct{ Case uint8 }

var refuseReminderMsg = tempest.CodecOf(0xBEEF03, "RefuseReminder",
	func(dst []byte, m refuseReminder) ([]byte, error) { return append(dst, m.Case), nil },
	func(b []byte) (refuseReminder, error) {
		if len(b) != 1 {
			return refuseReminder{}, errors.New("RefuseReminder: bad body")
		}
		return refuseReminder{b[0]}, nil
	})

// A reminder error an actor replies keeps its identity wherever the
// asker is: on another node, and on the owner's node (which gives it the
// form it has once it crossed), the registration refusals match their
// specific sentinel and reminders.ErrInvalid, and ErrNotFound matches
// itself alone.
func TestClusterReminderErrorsKeepTheirIdentity(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	cases := []struct {
		name string
		do   func(rem *tempest.Reminders, ctx actor.Context) error
		want []error
	}{
		{"period too short", func(rem *tempest.Reminders, ctx actor.Context) error {
			return rem.Register(ctx, reminders.Reminder{Name: "r", Period: time.Millisecond})
		}, []error{reminders.ErrPeriodTooShort, reminders.ErrInvalid}},
		{"bad catch-up", func(rem *tempest.Reminders, ctx actor.Context) error {
			return rem.Register(ctx, reminders.Reminder{Name: "r", Period: time.Minute, Catchup: reminders.FireUpTo})
		}, []error{reminders.ErrBadCatchup, reminders.ErrInvalid}},
		{"undeclared payload", func(rem *tempest.Reminders, ctx actor.Context) error {
			return rem.Register(ctx, reminders.Reminder{Name: "r", Period: time.Minute, Payload: struct{}{}})
		}, []error{reminders.ErrUnknownPayload, reminders.ErrInvalid}},
		{"no such reminder", func(rem *tempest.Reminders, ctx actor.Context) error {
			return rem.Unregister(ctx, "nope")
		}, []error{reminders.ErrNotFound}},
	}
	sentinels := map[string]error{
		"ErrInvalid": reminders.ErrInvalid, "ErrPeriodTooShort": reminders.ErrPeriodTooShort,
		"ErrDueInPast": reminders.ErrDueInPast, "ErrUnknownPayload": reminders.ErrUnknownPayload,
		"ErrBadName": reminders.ErrBadName, "ErrBadCatchup": reminders.ErrBadCatchup,
		"ErrTooMany": reminders.ErrTooMany, "ErrNotFound": reminders.ErrNotFound,
	}
	c := tempesttest.New(t, tempesttest.Options{Nodes: 2, Register: func(n *tempest.Node) error {
		rem := n.Reminders()
		return n.Register("refuser", func(string) actor.Actor {
			return actor.Func(func(ctx actor.Context, msg any) {
				if m, ok := msg.(refuseReminder); ok {
					ctx.ReplyError(cases[m.Case].do(rem, ctx))
				}
			})
		}, tempest.KindOptions{Messages: []tempest.Message{refuseReminderMsg}, Reminders: true})
	}})
	ref := c.Node("n1").Ref("refuser", "a")
	owner := c.Owner(ref)
	var other *tempest.Node
	for _, n := range c.Nodes() {
		if n != owner {
			other = n
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i, tc := range cases {
		var seen []string
		for _, n := range []*tempest.Node{owner, other} {
			_, err := n.Ask(ctx, ref, refuseReminder{uint8(i)})
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Errorf("%s, asked on %s: %v does not match %v", tc.name, n.Name(), err, want)
				}
			}
			var is []string
			for name, s := range sentinels {
				if errors.Is(err, s) {
					is = append(is, name)
				}
			}
			slices.Sort(is)
			if len(is) != len(tc.want) {
				t.Errorf("%s, asked on %s: %v matches %v, want only %v", tc.name, n.Name(), err, is, tc.want)
			}
			seen = append(seen, fmt.Sprint(err, is))
		}
		if seen[0] != seen[1] {
			t.Errorf("%s: the owner's asker sees %s, the other node's %s", tc.name, seen[0], seen[1])
		}
	}
	// Reminders.Cancel of a name no reminder can have, from either node:
	// the other node sent it to the owner, which answered with no code
	// for it (or, not UTF-8, it could not be encoded).
	for _, name := range []string{"", "\xff", strings.Repeat("n", reminders.MaxNameBytes+1)} {
		var seen []string
		for _, n := range []*tempest.Node{owner, other} {
			err := n.Reminders().Cancel(ctx, ref, name)
			if !errors.Is(err, reminders.ErrBadName) || !errors.Is(err, reminders.ErrInvalid) {
				t.Errorf("Cancel of %q on %s: %v, want ErrBadName and ErrInvalid", name, n.Name(), err)
			}
			seen = append(seen, fmt.Sprint(err))
		}
		if seen[0] != seen[1] {
			t.Errorf("Cancel of %q: the owner's node says %s, the other node %s", name, seen[0], seen[1])
		}
	}
}
