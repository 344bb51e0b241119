package cluster

import (
	"context"
	"maps"
	"strings"
	"time"

	"github.com/tempest-actors/tempest/manifest"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
)

// Full manifests reach placement through the table, not gossip: gossip
// metadata has room for a manifest's digest only. Each node proposes its
// own entry with its full manifest (an OpNode forwarded to the leader)
// whenever its applied table holds a different one; the leader's view of
// a peer then takes the manifest from the table when its digest is the
// one the peer gossips, so eligibility for kinds that require clauses
// sees every node's real manifest and the leader's reconcile does not
// overwrite what the peer published.

// manifestRetry is how long the publisher waits after a failed proposal
// (no leader yet, leadership lost) before it tries again.
const manifestRetry = 500 * time.Millisecond

// manifestLoop publishes this node's manifest into the table until the
// cluster stops.
func (c *Engine) manifestLoop() {
	defer c.wg.Done()
	reported := map[string]string{} // kind + "\x00" + node → digest warned about
	for {
		changed := c.pl.Changed()
		c.reportPolicies(reported)
		wait := c.cfg.Clock.After(manifestRetry)
		done, err := c.publishManifest()
		if err != nil {
			c.log.Debug("publish manifest", "error", err)
		}
		if ierr := c.publishInCluster(); ierr != nil {
			c.log.Debug("publish raft membership in gossip", "error", ierr)
			done = false
		}
		if done {
			wait = nil // nothing to do until the table changes
		}
		select {
		case <-c.ctx.Done():
			return
		case <-changed:
		case <-wait:
		}
	}
}

// publishInCluster says in this node's gossip metadata, once it holds
// raft state, that it does (placement.Peer.InCluster): a newcomer whose
// name sorts lowest then joins the cluster instead of bootstrapping
// another. Raft state is never given up while the node runs, so it is
// said once.
func (c *Engine) publishInCluster() error {
	if !c.pl.InCluster() {
		return nil
	}
	m := c.ml.Meta()
	if m.InCluster {
		return nil
	}
	m.InCluster = true
	ctx, cancel := context.WithTimeout(c.ctx, manifestRetry)
	defer cancel()
	return c.ml.UpdateMeta(ctx, m)
}

// publishManifest proposes this node's entry with its full manifest when
// the applied table has the node up with another manifest. It reports
// true when nothing is left to do. The proposal is idempotent: applying
// it twice leaves the same entry.
func (c *Engine) publishManifest() (bool, error) {
	var info *placement.NodeInfo
	c.pl.FSM().Read(func(t *placement.Table) {
		if n, ok := t.Nodes[c.name]; ok {
			cp := *n
			info = &cp
		}
	})
	if info == nil || info.Status != placement.StatusUp {
		// Not in the table yet (the leader adds it from membership), or
		// draining or down: the leader's status changes win; the node
		// publishes once it is up again.
		return info != nil, nil
	}
	if info.Manifest.Digest() == c.run.Manifest.Digest() {
		return true, nil
	}
	info.Manifest = c.run.Manifest
	info.Sync = ""
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	_, err := c.pl.Propose(ctx, placement.Command{Op: placement.OpNode, Node: info})
	return false, err
}

// peerManifest is the manifest placement sees for a peer gossiping
// digest: this node's own when the digests match, else the one the peer
// published into the table if it has that digest, else the empty
// manifest (the peer is eligible only for kinds without clause requirements until
// its manifest is known).
func (v *peerView) peerManifest(name, digest string) manifest.Manifest {
	if digest == v.digest {
		return v.man
	}
	var out manifest.Manifest
	if v.cl == nil || v.cl.pl == nil {
		return out
	}
	v.cl.pl.FSM().Read(func(t *placement.Table) {
		if n, ok := t.Nodes[name]; ok && n.Manifest.Digest() == digest {
			out = n.Manifest
		}
	})
	return out
}

// reportPolicies logs, once per change, every node whose policy digest
// for a kind differs from the one the cluster agrees on (a warning: that
// node receives none of the kind's shards), and when such a node agrees
// again. reported holds what was warned about; only manifestLoop uses it.
func (c *Engine) reportPolicies(reported map[string]string) {
	now := map[string]string{}
	for _, v := range c.PolicyDisagreements() {
		for node, d := range v.Differ {
			key := v.Kind + "\x00" + node
			now[key] = d
			if reported[key] == d {
				continue
			}
			msg := "policy digest differs from the cluster's: the node receives none of the kind's shards until it agrees"
			if node == c.name {
				msg = "this node's policy digest differs from the cluster's: it receives none of the kind's shards until it agrees"
			}
			c.log.Warn(msg, "kind", v.Kind, "dissenter", node, "digest", d, "agreed", v.Digest, "agree", v.Agree)
		}
	}
	for key := range reported {
		if _, ok := now[key]; !ok {
			kind, node, _ := strings.Cut(key, "\x00")
			c.log.Info("policy disagreement resolved (the node agrees, left or is down)", "kind", kind, "dissenter", node)
		}
	}
	clear(reported)
	maps.Copy(reported, now)
}

// askPolicies are the kinds' deadline policies as one applied table
// publishes them: per kind, as the nodes that agree on its policy publish
// it.
type askPolicies struct {
	changed <-chan struct{} // closed once the table they were read from changes
	kinds   map[string]askTimeouts
}

// askTimeouts is a kind's deadline policy.
type askTimeouts struct{ def, max time.Duration }

// ForeignAskTimeouts is the scheduler's Config.ForeignAskTimeouts: the
// deadline policy the cluster publishes for kind, so that an ask made
// here to a kind this node does not host gets the deadline it gets on
// its hosts, also while it waits here for an owner (a failover, a move).
// The policies are read again from the applied table after it changed.
func (c *Engine) ForeignAskTimeouts(kind string) (def, max time.Duration, ok bool) {
	if !c.placed.Load() {
		return 0, 0, false
	}
	p := c.askPolicies.Load()
	if p == nil || closed(p.changed) {
		c.amu.Lock()
		if p = c.askPolicies.Load(); p == nil || closed(p.changed) {
			p = &askPolicies{changed: c.pl.Changed(), kinds: map[string]askTimeouts{}}
			c.pl.FSM().Read(func(t *placement.Table) {
				for _, kind := range t.KindNames() {
					v := t.Policy(kind)
					if len(v.Agree) == 0 {
						continue
					}
					// Published only where not the defaults (kindSpecs).
					if spec, ok := t.Nodes[v.Agree[0]].Hosts(kind); ok && (spec.AskTimeout > 0 || spec.MaxAskTimeout > 0) {
						a := askTimeouts{spec.AskTimeout, spec.MaxAskTimeout}
						if a.max == 0 {
							a.max = prospero.DefaultMaxAskTimeout
						}
						p.kinds[kind] = a
					}
				}
			})
			c.askPolicies.Store(p)
		}
		c.amu.Unlock()
	}
	a, ok := p.kinds[kind]
	return a.def, a.max, ok
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// PolicyViews returns, for every kind in this node's applied placement
// table, the digest the cluster agrees on and the nodes that publish
// another (see placement.Table.Policy). nil before placement runs.
func (c *Engine) PolicyViews() []placement.PolicyView {
	pl := c.Placement()
	if pl == nil {
		return nil
	}
	var out []placement.PolicyView
	pl.FSM().Read(func(t *placement.Table) {
		for _, k := range t.KindNames() {
			out = append(out, t.Policy(k))
		}
	})
	return out
}

// PolicyDisagreements returns the views of PolicyViews in which some
// live node publishes a digest other than the agreed one.
func (c *Engine) PolicyDisagreements() []placement.PolicyView {
	var out []placement.PolicyView
	for _, v := range c.PolicyViews() {
		if len(v.Differ) > 0 {
			out = append(out, v)
		}
	}
	return out
}
