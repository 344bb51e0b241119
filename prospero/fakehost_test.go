package prospero_test

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
)

// fakeHost is a small in-memory scheduler implementing prospero.Host
// with the contract the supervisor relies on: one mailbox per identity
// that exists before the actor, a doorbell rung once per transition to
// "has mail, no actor", system operations run before user mail and never
// during a turn, one goroutine per running cell.
type fakeHost struct {
	sup *prospero.Supervisor
	// rang, if set, is told of each doorbell once the supervisor took it.
	rang func(prospero.Identity)

	mu     sync.Mutex
	cells  map[prospero.Identity]*fcell
	closed bool
	wg     sync.WaitGroup
}

var _ prospero.Host = (*fakeHost)(nil)

type fcell struct {
	id      prospero.Identity
	act     actor.Actor
	inc     uint64
	pending bool // doorbell rung, no actor yet
	running bool
	leaving bool                // a Passivate's last turn runs; the actor detaches after it
	sys     []func(*fcell) bool // run on the cell's goroutine; false ends the drain
	mail    []fmsg
}

type fmsg struct {
	msg   any
	reply chan fresult
}

type fresult struct {
	v   any
	err error
}

func newFakeHost() *fakeHost { return &fakeHost{cells: make(map[prospero.Identity]*fcell)} }

func (h *fakeHost) cellLocked(id prospero.Identity, inc uint64) *fcell {
	c := h.cells[id]
	if c == nil {
		c = &fcell{id: id, inc: max(inc, 1)}
		h.cells[id] = c
	}
	return c
}

// send admits msg for ref (reply may be nil).
func (h *fakeHost) send(ref actor.Ref, msg any, reply chan fresult) error {
	id := prospero.IdentityOf(ref)
	if _, err := h.sup.Registry().Lookup(id.Kind); err != nil {
		return err
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return errors.New("fake host closed")
	}
	c := h.cellLocked(id, 0)
	if inc := ref.Incarnation(); inc != 0 && inc != c.inc {
		h.mu.Unlock()
		return actor.ErrActorTerminated
	}
	c.mail = append(c.mail, fmsg{msg: msg, reply: reply})
	ring := false
	if c.act == nil {
		if !c.pending {
			c.pending, ring = true, true
		}
	} else {
		h.scheduleLocked(c)
	}
	h.mu.Unlock()
	if ring {
		if err := h.ring(id); err != nil {
			return err
		}
	}
	return nil
}

func (h *fakeHost) ring(id prospero.Identity) error {
	err := h.sup.Ring(id.Ref())
	if h.rang != nil {
		h.rang(id)
	}
	return err
}

func (h *fakeHost) Tell(ref actor.Ref, msg any) error { return h.send(ref, msg, nil) }

func (h *fakeHost) Ask(ref actor.Ref, msg any, timeout time.Duration) (any, error) {
	reply := make(chan fresult, 1)
	if err := h.send(ref, msg, reply); err != nil {
		return nil, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-reply:
		return r.v, r.err
	case <-t.C:
		return nil, actor.ErrDeadlineExceeded
	}
}

func (h *fakeHost) scheduleLocked(c *fcell) {
	if c.running || h.closed || (len(c.sys) == 0 && (c.act == nil || len(c.mail) == 0)) {
		return
	}
	c.running = true
	h.wg.Add(1)
	go h.drain(c)
}

func (h *fakeHost) drain(c *fcell) {
	defer h.wg.Done()
	for {
		h.mu.Lock()
		switch {
		case len(c.sys) > 0:
			op := c.sys[0]
			c.sys = c.sys[1:]
			h.mu.Unlock()
			if !op(c) {
				h.mu.Lock()
				c.running = false
				h.scheduleLocked(c)
				h.mu.Unlock()
				return
			}
		case c.act != nil && len(c.mail) > 0:
			m := c.mail[0]
			c.mail = c.mail[1:]
			a, inc := c.act, c.inc
			h.mu.Unlock()
			h.turn(c, a, inc, m)
		default:
			c.running = false
			h.mu.Unlock()
			return
		}
	}
}

// turn runs one message; a panic is reported as a fault.
func (h *fakeHost) turn(c *fcell, a actor.Actor, inc uint64, m fmsg) {
	ref := c.id.Ref()
	ctx := &fctx{self: ref.WithIncarnation(inc)}
	panicked := func() (p bool) {
		defer func() {
			if r := recover(); r != nil {
				p = true
				h.sup.Fault(ref, inc, prospero.FaultPanic, fmt.Errorf("panic: %v", r))
			}
		}()
		a.Receive(ctx, m.msg)
		return false
	}()
	// The turn's end is reported before its reply leaves, as in ariel
	// (an AfterTurn hook runs before the turn's outputs leave): a caller
	// that got its answer finds the turn's activity already recorded.
	if !panicked {
		if _, sys := m.msg.(actor.Started); !sys {
			h.sup.AfterTurn(ref, inc, a, true, nil)
		}
	}
	if m.reply != nil && ctx.replied {
		m.reply <- fresult{v: ctx.reply}
	}
}

func (h *fakeHost) Attach(ref actor.Ref, a actor.Actor) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.cellLocked(prospero.IdentityOf(ref), ref.Incarnation())
	if c.act != nil && c.leaving {
		// Attached while the previous value's last turn runs (the
		// supervisor may plan the next activation from inside Passivate's
		// final): like any system operation, it takes effect after the
		// one running, once the old value is detached.
		c.sys = append(c.sys, func(c *fcell) bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.attachLocked(c, ref, a)
			return false
		})
		return nil
	}
	if c.act != nil {
		return errors.New("fake host: already attached")
	}
	h.attachLocked(c, ref, a)
	return nil
}

// attachLocked attaches a to c and queues its Started turn first.
func (h *fakeHost) attachLocked(c *fcell, ref actor.Ref, a actor.Actor) {
	c.act, c.inc, c.pending = a, max(ref.Incarnation(), 1), false
	c.sys = append([]func(*fcell) bool{func(c *fcell) bool {
		h.turn(c, a, c.inc, fmsg{msg: actor.Started{}})
		return true
	}}, c.sys...)
	h.scheduleLocked(c)
}

func (h *fakeHost) pushSys(ref actor.Ref, op func(*fcell) bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.cells[prospero.IdentityOf(ref)]
	if c == nil {
		return actor.ErrActorTerminated
	}
	c.sys = append(c.sys, op)
	h.scheduleLocked(c)
	return nil
}

func (h *fakeHost) Restart(ref actor.Ref, a actor.Actor) error {
	return h.pushSys(ref, func(c *fcell) bool {
		h.mu.Lock()
		c.act = a
		c.inc++
		inc := c.inc
		h.mu.Unlock()
		h.turn(c, a, inc, fmsg{msg: actor.Started{}})
		return true
	})
}

func (h *fakeHost) Passivate(ref actor.Ref, final func(actor.Actor)) error {
	return h.pushSys(ref, func(c *fcell) bool {
		h.mu.Lock()
		a, inc := c.act, c.inc
		c.leaving = a != nil
		h.mu.Unlock()
		if a == nil {
			return true
		}
		h.turn(c, a, inc, fmsg{msg: actor.Passivating{}})
		if final != nil {
			final(a)
		}
		h.mu.Lock()
		c.act, c.leaving = nil, false
		ring := len(c.mail) > 0 && !c.pending
		c.pending = ring
		h.mu.Unlock()
		if ring {
			_ = h.ring(c.id)
		}
		return false
	})
}

func (h *fakeHost) Retire(ref actor.Ref, released func()) error {
	return h.pushSys(ref, func(c *fcell) bool {
		h.mu.Lock()
		a, inc := c.act, c.inc
		h.mu.Unlock()
		if a != nil {
			h.turn(c, a, inc, fmsg{msg: actor.Stopping{}})
		}
		h.mu.Lock()
		mail := c.mail
		c.act, c.mail = nil, nil
		delete(h.cells, c.id)
		h.mu.Unlock()
		for _, m := range mail {
			if m.reply != nil {
				m.reply <- fresult{err: actor.ErrActorTerminated}
			}
		}
		released()
		return false
	})
}

// close stops scheduling and waits for running cells.
func (h *fakeHost) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.wg.Wait()
}

// fctx is the actor.Context of a fake turn: Self and Reply only.
type fctx struct {
	self    actor.Ref
	reply   any
	replied bool
}

func (c *fctx) Self() actor.Ref           { return c.self }
func (c *fctx) Sender() actor.Ref         { return actor.Ref{} }
func (c *fctx) Now() time.Time            { return time.Now() }
func (c *fctx) Tell(actor.Ref, any) error { panic("fake context: Tell") }
func (c *fctx) Ask(actor.Ref, any, actor.Continuation, ...actor.AskOption) {
	panic("fake context: Ask")
}
func (c *fctx) Reply(msg any) {
	if !c.replied {
		c.reply, c.replied = msg, true
	}
}
func (c *fctx) ReplyError(error) {}
func (c *fctx) Spawn(actor.Actor, ...actor.SpawnOption) (actor.Ref, error) {
	panic("fake context: Spawn")
}
func (c *fctx) Stop(actor.Ref) {}
func (c *fctx) After(time.Duration, any, ...actor.TimerOption) actor.Cancel {
	panic("fake context: After")
}
func (c *fctx) Every(time.Duration, any, ...actor.TimerOption) actor.Cancel {
	panic("fake context: Every")
}
func (c *fctx) SetReceiveTimeout(time.Duration) {}
func (c *fctx) ReplyLater() actor.Replier       { return nil }
