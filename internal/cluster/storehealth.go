package cluster

import (
	"log/slog"
	"time"

	"github.com/tempest-actors/tempest/placement"
)

// A node whose state store cannot write (a full disk, an I/O error, a
// file damaged while it ran) fails every write of the shards it owns and
// cannot keep the copies of those it follows; one whose file system is
// short of room for it (prospero.BoltStore.Room) soon will. It says so in
// its table entry (placement.Node.ReportStore): the leader then hands its
// shards to other nodes (a planned move to an in-sync follower transfers
// nothing) and the owners of the shards it follows catch up other nodes
// in its place, so the cluster keeps its availability and its replica
// count while the disk is full. The node reports at once that its writes
// fail or that room is short (so a node restarted on a full disk takes
// no shards), and that they work again only once there is room and no
// write has failed for a hold time, which doubles each time they fail
// again soon after: a disk that fills again as soon as the shards come
// back does not move them to and fro. A node that restarts while its
// table entry says its store fails starts that hold afresh rather than
// reporting at once that it works.

const (
	// defaultStoreHold is how long writes must work before a node whose
	// store failed reports it working again.
	defaultStoreHold = 10 * time.Second
	// maxStoreHold bounds the hold as it doubles.
	maxStoreHold = 5 * time.Minute
	// storeRelapse: writes failing again within this time of being
	// reported working double the next hold.
	storeRelapse = time.Minute
)

// storeHealth decides what the node reports of its store: a pure state
// machine over the store's current failure and the time.
type storeHealth struct {
	base     time.Duration // the first hold
	hold     time.Duration
	reported string    // what was last reported; "" = working
	okSince  time.Time // writes work since (zero while they fail)
	clearAt  time.Time // when working was last reported after a failure
}

// observe takes the store's failure now ("" when its writes work) and
// returns what to report.
func (h *storeHealth) observe(failure string, now time.Time) string {
	if failure != "" {
		if h.reported == "" {
			if !h.clearAt.IsZero() && now.Sub(h.clearAt) < storeRelapse {
				h.hold = min(2*h.hold, maxStoreHold)
			} else {
				h.hold = h.base
			}
		}
		h.reported, h.okSince = failure, time.Time{}
		return failure
	}
	if h.reported == "" {
		return ""
	}
	if h.okSince.IsZero() {
		h.okSince = now
	}
	if now.Sub(h.okSince) >= h.hold {
		h.reported, h.clearAt = "", now
	}
	return h.reported
}

// watchStore reports the state store's health to placement; the fence
// loop calls it on every tick.
func (c *Engine) watchStore(now time.Time) {
	store := c.run.Store
	if store == nil {
		return
	}
	failure := ""
	if err := store.Damaged(); err != nil {
		failure = err.Error()
	} else if err := store.WriteFailure(); err != nil {
		failure = err.Error()
	} else if err := store.Room(); err != nil {
		// Short of room before a write failed (as a disk watermark
		// does), and what a node restarted on a full disk finds first.
		failure = "state store short of room: " + err.Error()
	}
	c.storeHealth.base = time.Duration(c.storeHold.Load())
	if !c.storeSeeded {
		// After a restart the table may say this node's store failed:
		// that stands until the hold has passed, as if the node had
		// never stopped. Read once the table is current (the lease is
		// fresh only after a sync barrier this node requested applied).
		if failure == "" && !c.pl.LeaseFresh(now) {
			return
		}
		c.pl.FSM().Read(func(t *placement.Table) {
			if ni := t.Nodes[c.name]; ni != nil && ni.StoreFailing != "" {
				c.storeHealth.reported, c.storeHealth.hold = ni.StoreFailing, c.storeHealth.base
			}
		})
		c.storeSeeded = true
	}
	was := c.storeHealth.reported
	r := c.storeHealth.observe(failure, now)
	switch {
	case r == was:
		return
	case was == "":
		c.log.LogAttrs(c.ctx, slog.LevelWarn, "state store failing: handing this node's shards and replica places to other nodes",
			slog.String("error", r))
	case r == "":
		c.log.LogAttrs(c.ctx, slog.LevelInfo, "state store writes work again: this node takes shards and replica places again")
	}
	c.pl.ReportStore(r)
}
