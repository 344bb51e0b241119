package wire

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
)

// fencedLocal is a fakeLocal whose node owns every actor at epoch cur,
// and whose fence records each stamp it checked.
type fencedLocal struct {
	*fakeLocal
	mu     sync.Mutex
	cur    uint64
	stamps []uint64
}

func (f *fencedLocal) Fence(to actor.Ref, epoch uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stamps = append(f.stamps, epoch)
	if epoch != f.cur {
		return NotOwner("b")
	}
	return nil
}

func TestMailStampedEpochIsFenced(t *testing.T) {
	net := NewMemNetwork(1, nil)
	reg := testRegistry(t)
	a := newMailNode(t, net, "a", reg, nil)
	fl := &fencedLocal{fakeLocal: newFakeLocal(), cur: 7}
	newMailNode(t, net, "b", reg, func(c *MailConfig) { c.Local = fl })
	ping := testPing{Kind: "k"}

	// A stale stamp: the ask is refused NOT_OWNER with the owner hint, the
	// tell comes back undelivered, and neither is delivered.
	if err := a.m.AskAt("b", 1, 3, userRef, childRef, ping, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	o := a.wait(t)
	var re *RefusedError
	if o.id != 1 || !errors.As(o.err, &re) || re.Reason != RefusedReasonNotOwner || re.OwnerHint != "b" ||
		!errors.Is(o.err, ErrNotOwner) {
		t.Fatalf("stale ask completed with %+v", o)
	}
	if err := a.m.TellAt("b", 3, userRef, childRef, ping); err != nil {
		t.Fatal(err)
	}
	select {
	case u := <-a.undeliv:
		if !errors.Is(u.err, ErrNotOwner) || u.to != userRef || u.from != childRef {
			t.Fatalf("stale tell undelivered as %+v", u)
		}
	case <-time.After(waitTimeout):
		t.Fatal("stale tell not reported undelivered")
	}

	// The current stamp and an unstamped tell are delivered; the fence is
	// asked only about stamped mail.
	if err := a.m.TellAt("b", 7, userRef, childRef, ping); err != nil {
		t.Fatal(err)
	}
	if err := a.m.Tell("b", userRef, childRef, ping); err != nil {
		t.Fatal(err)
	}
	if got := fl.waitN(t, 2); len(got) != 2 {
		t.Fatalf("delivered %d", len(got))
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if len(fl.stamps) != 3 || fl.stamps[0] != 3 || fl.stamps[1] != 3 || fl.stamps[2] != 7 {
		t.Fatalf("fence saw stamps %v, want [3 3 7]", fl.stamps)
	}
	if n := len(fl.got); n != 2 {
		t.Fatalf("%d deliveries, want 2 (stale mail must never run)", n)
	}
}
