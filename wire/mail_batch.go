package wire

import (
	"sync"

	"github.com/tempest-actors/tempest/wire/bare"

	"github.com/tempest-actors/tempest/actor"
)

// A run of frames from one lane (see BatchHandler) mostly carries tells to
// a few recipients. HandleBatch decodes them as Handle does, but admits the
// tells to each recipient together: one mailbox reservation and at most one
// wake-up per recipient and run, instead of one per message.

// BatchInbox is an optional extension of Inbox: an Inbox that admits many
// tells from one sender at once. *ariel.Inbox implements it.
type BatchInbox interface {
	Inbox
	// TellBatch admits the longest prefix of msgs the recipient has room
	// for and returns its length; when that is not all of msgs, err is
	// the refusal of msgs[n], and the caller refuses the rest.
	TellBatch(from actor.Ref, msgs []any) (n int, err error)
}

// maxTellGroups bounds the recipients a run's tells are grouped by; a run
// that names more delivers what it grouped so far and starts again.
const maxTellGroups = 16

// tellGroup is the tells of one run to one recipient from one sender, in
// arrival order.
type tellGroup struct {
	to     *rcpt
	inbox  BatchInbox
	from   *rcpt // nil: no sender
	msgs   []any
	tags   []uint32
	bodies [][]byte // the encoded bodies, aliasing the run's frames
}

// tellGroups is HandleBatch's working set, pooled.
type tellGroups struct {
	g []tellGroup
	n int
}

var tellGroupPool = sync.Pool{New: func() any { return &tellGroups{g: make([]tellGroup, maxTellGroups)} }}

// HandleBatch is the transport's BatchHandler: Handle for each frame of
// the run, except that tells to a recipient whose inbox admits batches
// are admitted together per recipient and sender. Mail to one recipient
// keeps its arrival order: a tell that cannot join its recipient's group
// (another sender, an inbox resolved anew, no inbox) first delivers that
// group, and any frame other than a tell first delivers every group.
func (m *Mailer) HandleBatch(from string, lane Lane, frames [][]byte) error {
	if lane == ControlLane || len(frames) == 1 || m.inboxes == nil {
		for _, f := range frames {
			if err := m.Handle(from, lane, f); err != nil {
				return err
			}
		}
		return nil
	}
	gs := tellGroupPool.Get().(*tellGroups)
	defer tellGroupPool.Put(gs)
	defer m.flushGroups(from, gs)
	for _, f := range frames {
		grouped, err := m.groupTell(from, gs, f)
		if err != nil {
			return err
		}
		if grouped {
			continue
		}
		m.flushGroups(from, gs)
		if err := m.Handle(from, lane, f); err != nil {
			return err
		}
	}
	return nil
}

// groupTell adds frame to its recipient's group when it is a tell that
// can be grouped, and reports whether it did. A tell refused at decoding
// or by the fence is refused here, as Handle would. It reads nothing but
// the frame's union tag when the frame is not a tell.
func (m *Mailer) groupTell(peer string, gs *tellGroups, frame []byte) (bool, error) {
	var d bare.Decoder
	d.Reset(frame, bare.Config{ZeroCopy: true, MaxMessageBytes: len(frame) + 1})
	if tag := d.Uint(); tag != EnvelopeTagTell || d.Err() != nil {
		return false, nil
	}
	v, err := parseTell(&d, frame)
	if err != nil {
		return false, nil // Handle reports it
	}
	to, err := m.actorAt(v.to, true)
	if err != nil {
		return false, nil
	}
	bi, ok := to.inbox.(BatchInbox)
	if !ok {
		// Delivered through Deliver: whatever waits for to goes first.
		m.flushKey(peer, gs, to.key)
		return false, nil
	}
	var fr *rcpt
	if v.from != nil {
		if fr, err = m.actorAt(v.from, false); err != nil {
			return false, nil
		}
	}
	m.c.tellsRecv.Add(1)
	msg, err := m.decodeBody(v.tag, v.body)
	if err == nil {
		err = m.fence(to.ref, v.epoch)
	}
	if err != nil {
		m.refuseTell(peer, to, fr, v.tag, v.body, err)
		return true, nil
	}
	g := gs.find(to, bi, fr)
	if g == nil {
		m.flushKey(peer, gs, to.key)
		if gs.n == len(gs.g) {
			m.flushGroups(peer, gs)
		}
		g = &gs.g[gs.n]
		gs.n++
		g.to, g.inbox, g.from = to, bi, fr
	}
	g.msgs = append(g.msgs, msg)
	g.tags = append(g.tags, v.tag)
	g.bodies = append(g.bodies, v.body)
	return true, nil
}

// find returns the open group of to through bi from fr, nil if none.
func (gs *tellGroups) find(to *rcpt, bi BatchInbox, fr *rcpt) *tellGroup {
	for i := gs.n - 1; i >= 0; i-- {
		g := &gs.g[i]
		if g.to == to && g.inbox == bi && g.from == fr {
			return g
		}
	}
	return nil
}

// flushKey delivers the open groups of the recipient whose encoded
// ActorID is key (at most one: a second is opened only after the first
// is delivered).
func (m *Mailer) flushKey(peer string, gs *tellGroups, key string) {
	for i := 0; i < gs.n; i++ {
		if gs.g[i].to.key == key {
			m.deliverGroup(peer, &gs.g[i])
			done := gs.g[i] // emptied, its slices kept
			copy(gs.g[i:gs.n], gs.g[i+1:gs.n])
			gs.n--
			gs.g[gs.n] = done
			return
		}
	}
}

// flushGroups delivers every open group, in the order they were opened.
func (m *Mailer) flushGroups(peer string, gs *tellGroups) {
	for i := 0; i < gs.n; i++ {
		m.deliverGroup(peer, &gs.g[i])
	}
	gs.n = 0
}

// deliverGroup admits g's tells and refuses those not admitted, then
// empties g (keeping its slices).
func (m *Mailer) deliverGroup(peer string, g *tellGroup) {
	var fromRef actor.Ref
	if g.from != nil {
		fromRef = g.from.ref
	}
	n, err := g.inbox.TellBatch(fromRef, g.msgs)
	for i := n; i < len(g.msgs); i++ {
		m.refuseTell(peer, g.to, g.from, g.tags[i], g.bodies[i], err)
	}
	clear(g.msgs)
	clear(g.bodies)
	*g = tellGroup{msgs: g.msgs[:0], tags: g.tags[:0], bodies: g.bodies[:0]}
}

// refuseTell sends the refusal of one tell to to, as handleTell does.
func (m *Mailer) refuseTell(peer string, to, from *rcpt, tag uint32, body []byte, err error) {
	r := refusalOf(err, to.id, tag)
	if from != nil {
		fid := from.id
		r.From, r.Body = &fid, body
	} else if r.Reason.Resendable() {
		r.Body = body
	}
	m.refuse(peer, to.lane, &r)
}
