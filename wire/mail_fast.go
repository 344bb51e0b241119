package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/wire/bare"
)

// The per-message path of tells. A stream of tells mostly names the same
// few recipients, so both ends keep what they derived from a recipient
// once: the sender its encoded ActorIDs, the receiver the reference, lane
// key and resolved local inbox behind the encoded bytes. Both caches are
// small direct-mapped tables of immutable entries; a miss costs what the
// uncached path costs, and a collision only evicts.

// Inbox is a local recipient resolved once, for delivering many tells to
// it. *ariel.Inbox implements it (Scheduler.Inbox).
type Inbox interface {
	// Tell admits msg from the remote sender from (zero if none); the
	// error is the admission outcome, as for LocalDelivery.Deliver.
	Tell(from actor.Ref, msg any) error
	// Live reports whether the inbox still reaches its actor; when it
	// does not, the Mailer resolves the recipient again.
	Live() bool
}

// InboxResolver is an optional extension of LocalDelivery: a Mailer
// whose LocalDelivery implements it resolves each recipient of inbound
// tells once and caches the Inbox, instead of resolving per message.
// Asks still go through Deliver. An Inbox that must re-check something per
// message (for instance that this node still owns the actor) does so in
// its Tell.
type InboxResolver interface {
	// Inbox resolves to. On an error the Mailer falls back to Deliver,
	// which reports the admission error.
	Inbox(to actor.Ref) (Inbox, error)
}

// WithInboxes returns local extended with InboxResolver through resolve,
// for a delivery whose inbox method returns a concrete type:
//
//	m, _ := wire.NewMailer(wire.MailConfig{Local: wire.WithInboxes(sched, sched.Inbox), ...})
func WithInboxes[I Inbox](local LocalDelivery, resolve func(actor.Ref) (I, error)) LocalDelivery {
	return inboxes[I]{local, resolve}
}

type inboxes[I Inbox] struct {
	LocalDelivery
	resolve func(actor.Ref) (I, error)
}

// DeliverChain passes an ask's call chain on when the wrapped delivery
// takes one.
func (d inboxes[I]) DeliverChain(to, from actor.Ref, msg any, deadline time.Time, chain []actor.Ref, reply func(any, error)) error {
	if cd, ok := d.LocalDelivery.(ChainDelivery); ok {
		return cd.DeliverChain(to, from, msg, deadline, chain, reply)
	}
	return d.Deliver(to, from, msg, deadline, reply)
}

func (d inboxes[I]) Inbox(to actor.Ref) (Inbox, error) {
	in, err := d.resolve(to)
	if err != nil {
		return nil, err
	}
	return in, nil
}

// Sizes of the two caches (powers of two). Both are direct-mapped: a
// sender or receiver whose mail rotates over more recipients than its
// cache has slots misses on nearly every message (a header encoded, or
// an ActorID decoded and an inbox resolved, at a few allocations each),
// and two recipients of one slot evict each other; they are sized for
// about a thousand recipients in rotation per node (256 KiB of slots
// per Mailer), where a few per cent of the tells miss.
const (
	idSlots   = 16384
	rcptSlots = 16384
)

// idHdr is the encoded recipient and optional sender of outbound mail:
// To, then the optional From, as a Tell and an Ask both carry them.
type idHdr struct {
	to, from actor.Ref
	lane     uint64 // RefHash(to)
	ids      []byte
}

// idSlot picks a sender-cache slot from the references: the recipient's
// whole key (virtual actors' keys often differ only in their middle, as
// user-1042 and user-1342), cheap parts of the rest.
func (m *Mailer) idSlot(to, from *actor.Ref) int {
	scope, key, id, inc := to.Parts()
	h := uint(len(scope))*0x9E3779B1 ^ uint(id) ^ uint(inc)<<7
	if len(key) > 0 {
		h ^= uint(maphash.String(m.seed, key))
	}
	if fs, fk, fid, _ := from.Parts(); fs != "" {
		h ^= uint(len(fk))*0xC2B2AE3D ^ uint(fid)<<5
		if len(fk) > 0 {
			h ^= uint(fk[len(fk)-1]) << 17
		}
	}
	h ^= h >> 13
	return int(h & (idSlots - 1))
}

// header returns the encoded ids of to and from, cached.
func (m *Mailer) header(to, from actor.Ref) (*idHdr, error) {
	slot := &m.ids[m.idSlot(&to, &from)]
	if h := slot.Load(); h != nil && h.to == to && h.from == from {
		return h, nil
	}
	tid := ActorIDOf(to)
	b, err := tid.AppendBARE(make([]byte, 0, 32))
	if err != nil {
		return nil, bare.WrapEncodeError("To", err)
	}
	if from.IsZero() {
		b = append(b, 0)
	} else {
		fid := ActorIDOf(from)
		b = append(b, 1)
		if b, err = fid.AppendBARE(b); err != nil {
			return nil, bare.WrapEncodeError("From", err)
		}
	}
	h := &idHdr{to: to, from: from, lane: RefHash(to), ids: b}
	slot.Store(h)
	return h, nil
}

// bodyGap is the room left between an envelope's head and its body for
// the body's length, written once the body is encoded.
const bodyGap = binary.MaxVarintLen64

// appendMail finishes a mail envelope whose head (union tag through the
// fields before Tag) is buf[:len(buf)]: it appends the tag, the length
// and msg's encoding, and returns the frame. The body is encoded in
// place, after a gap that the length then fills; the head moves up to
// close what is left of the gap, so nothing is encoded twice.
func (m *Mailer) appendMail(buf []byte, msg any) (frame, out []byte, err error) {
	var e *regEntry
	tag := TagNil
	if msg != nil {
		if e = m.reg.lookup(msg); e == nil {
			return nil, buf, fmt.Errorf("%w: %T", ErrUnregistered, msg)
		}
		tag = e.tag
	}
	buf = bare.AppendU32(buf, tag)
	head := len(buf)
	buf = append(buf, make([]byte, bodyGap)...)
	if e != nil {
		if buf, err = e.encode(buf, msg); err != nil {
			return nil, buf, err
		}
	}
	n := len(buf) - head - bodyGap
	var lb [binary.MaxVarintLen64]byte
	l := binary.PutUvarint(lb[:], uint64(n))
	shift := bodyGap - l
	copy(buf[head+shift:], lb[:l])
	copy(buf[shift:], buf[:head])
	return buf[shift:], buf, nil
}

// rcpt is what the receiver derived from the encoded bytes of one
// ActorID.
type rcpt struct {
	key  string // the encoded ActorID
	id   ActorID
	ref  actor.Ref
	lane uint64 // RefHash(ref)
	// inbox is the resolved local recipient; nil when the entry was made
	// for a sender, or the delivery resolves no inboxes.
	inbox Inbox
	// tags are the messages to's kind declared (nil: any registered one).
	tags KindTags
}

// skipActorID reads past an encoded ActorID checking only its framing;
// the bytes are decoded strictly (once) when they miss the cache.
func skipActorID(d *bare.Decoder) {
	d.Bytes(d.Count(1))
	d.Bytes(d.Count(1))
	d.Uint()
}

// actorAt returns the entry for the encoded ActorID b, decoding it on a
// miss. With resolve set, the entry has an inbox when the LocalDelivery
// can resolve one.
func (m *Mailer) actorAt(b []byte, resolve bool) (*rcpt, error) {
	resolve = resolve && m.inboxes != nil
	slot := &m.rcpts[maphash.Bytes(m.seed, b)&(rcptSlots-1)]
	old := slot.Load()
	if old != nil && old.key == string(b) {
		if !resolve || (old.inbox != nil && old.inbox.Live()) {
			return old, nil
		}
	}
	r := &rcpt{}
	if old != nil && old.key == string(b) {
		*r = *old
		r.inbox = nil
	} else {
		id, err := m.decodeIDBytes(b)
		if err != nil {
			return nil, err
		}
		r.id = id
		ref, err := RefOf(&r.id)
		if err != nil {
			return nil, err
		}
		r.key, r.ref, r.lane = string(b), ref, RefHash(ref)
		r.tags = m.reg.KindOf(ref.Kind())
	}
	if resolve {
		in, err := m.inboxes.Inbox(r.ref)
		if err != nil || in == nil {
			// Not cached: the recipient may become resolvable later, and
			// Deliver reports the error.
			return r, nil
		}
		r.inbox = in
	}
	slot.Store(r)
	return r, nil
}

// tellView is a Tell envelope read without decoding its ActorIDs: To and
// From are their encoded bytes (From nil when absent), Body aliases the
// frame.
type tellView struct {
	to, from []byte
	epoch    uint64
	tag      uint32
	body     []byte
}

// parseTell reads a Tell (the union tag is read) from d, which reads
// frame. The ActorIDs are checked strictly when they are looked up.
func parseTell(d *bare.Decoder, frame []byte) (v tellView, err error) {
	v = parseTellFields(d, frame)
	return v, d.Finish()
}

// parseTellFields reads the fields of a Tell, which may be the last member
// of a TracedTell: the caller checks for trailing bytes.
func parseTellFields(d *bare.Decoder, frame []byte) (v tellView) {
	if !d.Enter() {
		return v
	}
	start := d.Offset()
	skipActorID(d)
	v.to = frame[start:d.Offset()]
	if d.Optional() {
		fs := d.Offset()
		skipActorID(d)
		v.from = frame[fs:d.Offset()]
	}
	v.epoch = d.Uint()
	v.tag = d.U32()
	v.body = d.Data(nil)
	d.Leave()
	return v
}

// decodeIDBytes decodes the encoded ActorID b strictly, names interned.
func (m *Mailer) decodeIDBytes(b []byte) (ActorID, error) {
	var id ActorID
	var d bare.Decoder
	d.Reset(b, bare.Config{ZeroCopy: true, MaxMessageBytes: len(b) + 1})
	m.decodeID(&d, &id)
	return id, d.Finish()
}

// handleTell decodes and delivers one Tell envelope (the union tag is
// read), or the Tell of a TracedTell whose trace context trace is (read,
// and left open in d). An error means the envelope is malformed.
func (m *Mailer) handleTell(peer string, d *bare.Decoder, frame []byte, trace *TraceContext) error {
	var v tellView
	var err error
	if trace == nil {
		v, err = parseTell(d, frame)
	} else {
		v = parseTellFields(d, frame)
		d.Leave()
		err = d.Finish()
	}
	if err != nil {
		return err
	}
	m.c.tellsRecv.Add(1)
	to, err := m.actorAt(v.to, true)
	if err != nil {
		return err
	}
	var from *rcpt
	var fromRef actor.Ref
	if v.from != nil {
		if from, err = m.actorAt(v.from, false); err != nil {
			return err
		}
		fromRef = from.ref
	}
	msg, err := m.decodeBody(v.tag, v.body)
	if err != nil {
		err = fmt.Errorf("kind %q: %w", to.ref.Kind(), err) // a tag number means nothing to the sender
	} else if err = to.tags.Check(to.ref.Kind(), v.tag, msg); err != nil {
		m.c.undeclared.Add(1)
	} else {
		err = m.fence(to.ref, v.epoch)
	}
	if err == nil {
		if td, ok := m.cfg.Local.(TraceDelivery); ok && trace != nil {
			err = td.DeliverTraced(to.ref, fromRef, msg, time.Time{}, nil, trace, nil)
		} else {
			err = m.tellLocal(to, fromRef, msg)
		}
	}
	if err != nil {
		r := refusalOf(err, to.id, v.tag)
		if from != nil {
			fid := from.id
			r.From, r.Body = &fid, v.body
		} else if r.Reason.Resendable() {
			// Program code saw its send queued and cannot be told, but
			// its node can send a tell that never ran again.
			r.Body = v.body
		}
		m.refuse(peer, to.lane, &r)
	}
	return nil
}

// tellLocal admits msg for to through its inbox, or through Deliver.
func (m *Mailer) tellLocal(to *rcpt, from actor.Ref, msg any) error {
	in := to.inbox
	if in == nil {
		return m.cfg.Local.Deliver(to.ref, from, msg, time.Time{}, nil)
	}
	err := in.Tell(from, msg)
	if err == nil || !errors.Is(err, actor.ErrActorTerminated) || in.Live() {
		return err
	}
	// The cached actor ended between the check and the tell, and nothing
	// was admitted: resolve once more, as an uncached tell would have.
	fresh, rerr := m.actorAt([]byte(to.key), true)
	if rerr != nil {
		return err
	}
	if fresh.inbox == nil {
		return m.cfg.Local.Deliver(to.ref, from, msg, time.Time{}, nil)
	}
	return fresh.inbox.Tell(from, msg)
}

// mailCaches are the Mailer's per-recipient caches.
type mailCaches struct {
	ids     [idSlots]atomic.Pointer[idHdr]
	rcpts   [rcptSlots]atomic.Pointer[rcpt]
	seed    maphash.Seed
	inboxes InboxResolver
	fences  EpochFence
}
