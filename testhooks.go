package tempest

import (
	"context"
	"errors"

	"github.com/tempest-actors/tempest/internal/crashhook"
	"github.com/tempest-actors/tempest/internal/testhooks"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/wire"
)

func init() {
	testhooks.Halt = func(ctx context.Context, n any) error {
		nd := n.(*Node)
		// The state store first, as a kill leaves it: nothing queued
		// is committed any more.
		nd.mu.Lock()
		store := nd.store
		nd.mu.Unlock()
		if store != nil {
			crashhook.Abandon(store)
		}
		return nd.close(ctx, false)
	}
	testhooks.Pausable = func(n any) error {
		nd := n.(*Node)
		nd.mu.Lock()
		defer nd.mu.Unlock()
		switch {
		case nd.state != stateNew:
			return errors.New("tempest: a node is made pausable before Start")
		case nd.eng == nil:
			return errors.New("tempest: a standalone node has no network to pause")
		}
		nd.eng.MakePausable()
		return nil
	}
	testhooks.Pause = func(n any, paused bool) error {
		if nd := n.(*Node); nd.eng != nil {
			return nd.eng.Pause(paused)
		}
		return errors.New("tempest: node is not pausable")
	}
	testhooks.Simulate = func(n any, net *wire.MemNetwork, view func(membership.Member) *membership.Fake, gone func(bool)) error {
		nd := n.(*Node)
		nd.mu.Lock()
		defer nd.mu.Unlock()
		switch {
		case nd.state != stateNew:
			return errors.New("tempest: a node is simulated from before Start")
		case nd.eng == nil:
			return errors.New("tempest: a standalone node has no network to simulate")
		case net == nil || view == nil || gone == nil:
			return errors.New("tempest: Simulate needs a network, a view and a gone function")
		}
		nd.eng.Simulate(net, view, gone)
		return nil
	}
	testhooks.Isolate = func(n any) {
		if nd := n.(*Node); nd.eng != nil {
			nd.eng.Isolate()
		}
	}
}
