package cluster

import (
	"context"
	"errors"
	"testing"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero/federation"
)

// TestControlRequestsWhileStartingAreRefused: a node's control lane is
// handled from the moment its transport exists, before start has made
// placement. A restarted node that a leader asks to move a shard away in
// that window (the simulation found it: a crash and restart) must refuse
// the request as not serving, which the leader retries, not dereference
// placement that is not there yet.
func TestControlRequestsWhileStartingAreRefused(t *testing.T) {
	c := New(Config{Name: "n1"}, nil)
	h := fedHandler{c}
	ctx := context.Background()
	ref := federation.Actor{Kind: "counter", Key: "a"}
	requests := map[string]func() error{
		"Forward": func() error { return h.Forward(ctx, "n2", &federation.ForwardCommand{Command: []byte{1}}) },
		"Move": func() error {
			return h.Move(ctx, "n2", &federation.MoveRequest{Group: "counter", Epoch: 3, From: "n1", To: "n2"})
		},
		"HandoffBegin": func() error { return h.HandoffBegin(ctx, "n2", &federation.HandoffBegin{Group: "counter", Epoch: 3}) },
		"HandoffDone":  func() error { return h.HandoffDone(ctx, "n2", &federation.HandoffDone{Group: "counter", Epoch: 3}) },
		"Status": func() error {
			_, err := h.Status(ctx, "n2", &federation.StatusRequest{Actor: ref, Epoch: 3})
			return err
		},
		"Passivate": func() error { return h.Passivate(ctx, "n2", &federation.PassivateRequest{Actor: ref, Epoch: 3}) },
		"Hydrate": func() error {
			return h.Hydrate(ctx, "n2", &federation.HydrateRequest{Group: "counter", Epoch: 3, Actors: []federation.Actor{ref}})
		},
		"ReminderList": func() error {
			_, err := h.ReminderList(ctx, "n2", &federation.ReminderListRequest{Actor: ref, Epoch: 3})
			return err
		},
		"ReminderCancel": func() error {
			return h.ReminderCancel(ctx, "n2", &federation.ReminderCancelRequest{Actor: ref, Epoch: 3})
		},
	}
	for name, req := range requests {
		t.Run(name, func(t *testing.T) {
			if err := req(); !errors.Is(err, actor.ErrProcessUnavailable) {
				t.Fatalf("%s while starting: %v, want actor.ErrProcessUnavailable", name, err)
			}
		})
	}
	// A notice is dropped: nothing was begun to abort.
	h.HandoffAbort("n2", &federation.HandoffAbort{Group: "counter", Epoch: 3})
}
