package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/federation"
	"github.com/tempest-actors/tempest/reminders"
	"github.com/tempest-actors/tempest/wire"
)

// serviceState is the bulk state stream of a handoff: the old owner
// writes the shard's StateRecords on it, nothing else, after the new
// owner accepted its HandoffBegin on the control lane.
const serviceState = "tempest-state"

// Why a peer refused a federation request; each has a code of its own
// (see fedCodes), so the sender branches on the same sentinel.
var (
	// errStaleTransfer: a handoff's state arrived for a move this node's
	// applied table does not show (completed, aborted, superseded, or
	// never begun).
	errStaleTransfer = errors.New("tempest: stale handoff refused")
	// errShipRefused marks a handoff the old owner refuses: its table
	// shows another owner, epoch or target than the move asked for.
	errShipRefused = errors.New("tempest: handoff refused")
	// errUnknownTransfer: a handoff's records or done for a transfer the
	// new owner has not begun (or has dropped: aborted, expired).
	errUnknownTransfer = errors.New("tempest: handoff not begun")
	// errCountMismatch: done announced another number of records than
	// arrived.
	errCountMismatch = errors.New("tempest: handoff record count mismatch")
	// errNotOwner: the peer asked does not own the actor (its hint says
	// who does). Status and Passivate retry elsewhere; it never reaches
	// their callers.
	errNotOwner = errors.New("tempest: peer does not own the actor")
)

// fedCodes is the federation protocol's table of answer codes. Every
// node is built with this table, so an answer matches on the caller the
// sentinel the error matched on the node that answered.
var fedCodes = federation.Codes{
	federation.CodeBadRequest:       {federation.ErrBadRequest},
	federation.CodeNotLeader:        {placement.ErrNotLeader},
	federation.CodeNoQuorum:         {ErrNoQuorum},
	federation.CodeBadCommand:       {placement.ErrBadCommand},
	federation.CodeStaleMove:        {errStaleTransfer},
	federation.CodeNotOwner:         {errNotOwner},
	federation.CodeNotServing:       {actor.ErrProcessUnavailable},
	federation.CodeUnknownKind:      {actor.ErrUnknownKind},
	federation.CodeInvalidKey:       {actor.ErrInvalidKey},
	federation.CodeNoEligibleNode:   {actor.ErrNoEligibleNode},
	federation.CodeDeadlineExceeded: {context.DeadlineExceeded},
	federation.CodeClosed:           {ErrClosed, reminders.ErrClosed},
	federation.CodeUnknownTransfer:  {errUnknownTransfer},
	federation.CodeCountMismatch:    {errCountMismatch},
	federation.CodeMoveRefused:      {errShipRefused},
	federation.CodeBusy:             {federation.ErrBusy},
	federation.CodeDuplicate:        {federation.ErrDuplicate},
	federation.CodeNoReminder:       {reminders.ErrNotFound},
	federation.CodeRemindersNotHeld: {reminders.ErrNotOwner},
	federation.CodeNotCommitted:     {actor.ErrNotCommitted},
	federation.CodeNoWitness:        {placement.ErrNoWitness},
	federation.CodeSyncHeld:         {placement.ErrSyncHeld},
}

// ownerHint is an errNotOwner that names the owner, for the answer's
// ownerHint field.
type ownerHint struct{ owner string }

func (h ownerHint) Error() string   { return fmt.Sprintf("%v (owner %q)", errNotOwner, h.owner) }
func (h ownerHint) Unwrap() error   { return errNotOwner }
func (h ownerHint) Hint() string    { return h.owner }
func (h ownerHint) Is(e error) bool { return e == errNotOwner }

// fedSender is the federation endpoint's view of the transport, which
// is created after the endpoint (the transport needs the endpoint's
// handler).
type fedSender struct{ tr atomic.Pointer[transport] }

func (s *fedSender) SendControlWait(ctx context.Context, peer string, frame []byte) error {
	tr := s.tr.Load()
	if tr == nil {
		return wire.ErrUnavailable
	}
	return (*tr).SendControlWait(ctx, peer, frame)
}

func (s *fedSender) SendControl(peer string, frame []byte) error {
	tr := s.tr.Load()
	if tr == nil {
		return wire.ErrUnavailable
	}
	return (*tr).SendControl(peer, frame)
}

// newFederation builds the node's federation endpoint; Start
// attaches the transport to c.fedTr once it exists.
func (c *Engine) newFederation() error {
	c.fedTr = &fedSender{}
	fe, err := federation.New(federation.Config{Sender: c.fedTr, Handler: fedHandler{c}, Codes: fedCodes, Clock: c.cfg.Clock,
		Unavailable: actor.ErrProcessUnavailable, Logger: c.log})
	if err != nil {
		return err
	}
	c.fed = fe
	c.transfers = transfers{}
	return nil
}

// budgetOf is the time left until ctx's deadline in ns, or def.
func budgetOf(ctx context.Context, def time.Duration) uint64 {
	if dl, ok := ctx.Deadline(); ok {
		return uint64(max(time.Until(dl), time.Millisecond))
	}
	return uint64(def)
}

// bounded is ctx with a deadline def from now if it has none. A request
// to a peer is made under it, and grants the peer the time left
// (budgetOf): the caller waits for the answer no longer than the peer
// works on it, so that a request or an answer lost on the way (a lane
// reset, a peer that never answers) fails the call instead of holding
// it, and whatever retries it, forever.
func bounded(ctx context.Context, def time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, def)
}

// ---- placement: command forwarding and moves ----

// forward sends a placement command to the leader.
func (c *Engine) forward(ctx context.Context, leader string, cmd []byte) error {
	if leader == c.name {
		return c.pl.ApplyForwarded(ctx, c.name, cmd)
	}
	ctx, cancel := bounded(ctx, 10*time.Second)
	defer cancel()
	return c.fed.Call(ctx, leader, &federation.ForwardCommand{Command: cmd, BudgetNs: budgetOf(ctx, 0)})
}

// moveRequest asks the old owner of m to hand the shard off, within
// ctx's budget (the leader's): the old owner works under that budget,
// never its own, since a transfer still running after the leader gave up
// could reach the new owner late.
func (c *Engine) moveRequest(ctx context.Context, m placement.Move) error {
	ctx, cancel := bounded(ctx, 30*time.Second)
	defer cancel()
	return c.fed.Call(ctx, m.From, &federation.MoveRequest{Group: m.Shard.Group, Shard: uint32(m.Shard.Index),
		Epoch: m.Epoch, From: m.From, To: m.To, BudgetNs: budgetOf(ctx, 0)})
}

// ---- handoff: the old owner's side ----

// sendStates ships recs of shard to peer as the handoff to epoch:
// HandoffBegin on the control lane, the records on the bulk state
// stream, HandoffDone on the control lane, whose answer says whether the
// new owner stored them all. On failure after the begin it tells the new
// owner with HandoffAbort.
func (c *Engine) sendStates(ctx context.Context, peer string, shard placement.ShardRef, epoch uint64, recs []shipped) error {
	ctx, cancel := bounded(ctx, 30*time.Second)
	defer cancel()
	idx := uint32(shard.Index)
	if err := c.fed.Call(ctx, peer, &federation.HandoffBegin{Group: shard.Group, Shard: idx, Epoch: epoch,
		BudgetNs: budgetOf(ctx, 0)}); err != nil {
		return err
	}
	abort := func(err error) error {
		actx, cancel := context.WithTimeout(c.ctx, time.Second)
		defer cancel()
		code := fedCodes.Result(0, err).Code
		if nerr := c.fed.Notify(actx, peer, &federation.HandoffAbort{Group: shard.Group, Shard: idx, Epoch: epoch, Code: code}); nerr != nil {
			c.log.LogAttrs(ctx, slog.LevelDebug, "handoff abort not sent", slog.String("to", peer), slog.Any("error", nerr))
		}
		return err
	}
	if len(recs) > 0 {
		if err := c.writeRecords(ctx, peer, shard, epoch, recs); err != nil {
			return abort(err)
		}
	}
	if err := c.fed.Call(ctx, peer, &federation.HandoffDone{Group: shard.Group, Shard: idx, Epoch: epoch,
		Count: uint64(len(recs)), BudgetNs: budgetOf(ctx, 0)}); err != nil {
		return abort(err)
	}
	return nil
}

// writeRecords writes recs on a bulk state stream to peer and closes it.
func (c *Engine) writeRecords(ctx context.Context, peer string, shard placement.ShardRef, epoch uint64, recs []shipped) error {
	conn, err := c.tr.DialStream(ctx, peer, serviceState)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	w := bufio.NewWriter(conn)
	var b []byte
	for i, r := range recs {
		rec := federation.StateRecord{Group: shard.Group, Shard: uint32(shard.Index), Epoch: epoch, Seq: uint64(i + 1),
			Actor: federation.Actor{Kind: r.id.Kind, Key: r.id.Key, Incarnation: r.inc}, State: r.state, Version: r.version}
		if b, err = rec.AppendBARE(b[:0]); err != nil {
			return err
		}
		if err := writeMsg(w, b); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return conn.Close()
}

// ---- handoff: the new owner's side ----

// lookupTransfer returns the open transfer of k.
func (c *Engine) lookupTransfer(k transferKey) *transfer {
	c.xmu.Lock()
	defer c.xmu.Unlock()
	return c.transfers.lookup(k, c.cfg.Clock.Now())
}

type fedHandler struct{ c *Engine }

// starting refuses a request that arrives while start has not yet made
// placement: control frames are handled from the moment the transport
// exists, and a restarted node may be asked (by a leader that saw it
// come back) to move a shard before its raft node is up.
func (c *Engine) starting() error {
	if !c.placed.Load() {
		return fmt.Errorf("%w: %s is starting", actor.ErrProcessUnavailable, c.name)
	}
	return nil
}

var _ federation.Handler = fedHandler{}

// Forward applies a placement command a follower forwarded (this node
// must be the leader), if it is one the follower may propose: a change
// of its own (placement.Forwardable), judged by the name its link
// proved.
func (h fedHandler) Forward(ctx context.Context, from string, m *federation.ForwardCommand) error {
	if err := h.c.starting(); err != nil {
		return err
	}
	return h.c.pl.ApplyForwarded(ctx, from, m.Command)
}

// LeaseWitness answers a new raft leader asking about the terms before
// its own (placement.Node.Witness).
func (h fedHandler) LeaseWitness(_ context.Context, _ string, m *federation.LeaseWitnessRequest) (federation.LeaseWitnessReply, error) {
	if err := h.c.starting(); err != nil {
		return federation.LeaseWitnessReply{}, err
	}
	age, err := h.c.pl.Witness(m.Term)
	if err != nil {
		return federation.LeaseWitnessReply{}, err
	}
	return federation.LeaseWitnessReply{AgeNs: uint64(age)}, nil
}

// Move is the old owner's side of a move the leader asks for.
func (h fedHandler) Move(ctx context.Context, _ string, m *federation.MoveRequest) error {
	if err := h.c.starting(); err != nil {
		return err
	}
	c := h.c
	if m.From != c.name || m.To == "" || m.To == c.name {
		return fmt.Errorf("%w: move of shard %d from %q to %q sent to %s", federation.ErrBadRequest, m.Shard, m.From, m.To, c.name)
	}
	return c.shipShard(ctx, placement.Move{Shard: placement.ShardRef{Group: m.Group, Index: int(m.Shard)},
		From: m.From, Epoch: m.Epoch, To: m.To})
}

// HandoffBegin opens a transfer once this node's applied table shows the
// move (from owning the shard at the epoch before, moving here).
func (h fedHandler) HandoffBegin(ctx context.Context, from string, m *federation.HandoffBegin) error {
	if err := h.c.starting(); err != nil {
		return err
	}
	c := h.c
	shard := placement.ShardRef{Group: m.Group, Index: int(m.Shard)}
	if err := c.admitTransfer(ctx, shard, from, m.Epoch); err != nil {
		return err
	}
	budget := min(time.Duration(min(m.BudgetNs, uint64(federation.MaxBudget))), federation.MaxBudget)
	if budget <= 0 {
		budget = federation.DefaultBudget
	}
	c.xmu.Lock()
	defer c.xmu.Unlock()
	return c.transfers.begin(transferKey{from: from, shard: shard, epoch: m.Epoch}, c.cfg.Clock.Now(), budget)
}

// HandoffDone answers once every record of the transfer arrived on its
// stream and was stored, and the table still shows the move.
func (h fedHandler) HandoffDone(ctx context.Context, from string, m *federation.HandoffDone) error {
	if err := h.c.starting(); err != nil {
		return err
	}
	c := h.c
	shard := placement.ShardRef{Group: m.Group, Index: int(m.Shard)}
	k := transferKey{from: from, shard: shard, epoch: m.Epoch}
	t := c.lookupTransfer(k)
	if t == nil {
		return fmt.Errorf("%w: done of %s epoch %d from %s", errUnknownTransfer, shard, m.Epoch, from)
	}
	drop := func() {
		c.xmu.Lock()
		c.transfers.drop(k, t)
		c.xmu.Unlock()
	}
	for {
		c.xmu.Lock()
		done, err := t.verdict(m.Count)
		ch, stored, rems := t.changed, t.stored, t.reminders
		c.xmu.Unlock()
		if done {
			drop()
			if err != nil {
				return err
			}
			if err := c.admitTransfer(ctx, shard, from, m.Epoch); err != nil {
				return err
			}
			if c.run.Replicas != nil {
				// Possibly a promotion (the old owner decides, by its own
				// table): this node may take the shard over from its own
				// copy. Every record it acknowledged must be in its store
				// before it serves, and in its shard index.
				if err := c.run.Replicas.Flush(); err != nil {
					return err
				}
				held, err := c.heldInShard(ctx, shard)
				if err != nil {
					return err
				}
				stored = slices.Clip(stored)
				for _, id := range held {
					if !isReserved(id) { // the shard's reminders are in no index
						stored = append(stored, id)
					}
				}
			}
			// This node may hold older copies of the shard's reminder
			// records (it was a replica that fell out of the set): those
			// the old owner no longer has would bring cancelled reminders
			// back.
			if err := c.dropStaleReminders(ctx, shard, m.Epoch-1, rems); err != nil {
				return err
			}
			if len(stored) == 0 {
				return nil
			}
			return c.updateIndex(ctx, shard, stored, nil)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			drop()
			return ctx.Err()
		}
	}
}

// HandoffAbort drops the transfer: its stream stops at the next record.
func (h fedHandler) HandoffAbort(from string, m *federation.HandoffAbort) {
	if !h.c.placed.Load() {
		return // nothing begun here to abort
	}
	c := h.c
	k := transferKey{from: from, shard: placement.ShardRef{Group: m.Group, Index: int(m.Shard)}, epoch: m.Epoch}
	c.xmu.Lock()
	defer c.xmu.Unlock()
	if c.transfers.abort(k, m.Code) {
		c.aborts.Add(1)
	}
}

// CancelAsk withdraws the ask id that from's caller gave up on, if its
// turn has not started here.
func (h fedHandler) CancelAsk(from string, m *federation.CancelAsk) federation.Code {
	if h.c.rem != nil && h.c.rem.Mailer().Withdraw(from, m.Id) {
		return federation.CodeOk
	}
	return federation.CodeUnknownAsk
}

// serveState reads a bulk state stream: the records of a transfer begun
// on the control lane. Each is stored only while this node's applied
// table shows that very move (the sender owning the shard at the epoch
// before the announced one, moving to this node), checked again before
// every write: records that arrive after the move completed, aborted or
// was superseded are refused, so they can never overwrite state this
// node acknowledged as the owner since. A refusal ends the stream; the
// transfer's HandoffDone is answered with its code.
func (c *Engine) serveState(conn net.Conn) error {
	from := conn.RemoteAddr().String()
	r := bufio.NewReader(conn)
	var t *transfer
	var k transferKey
	fail := func(t *transfer, err error) error {
		c.log.LogAttrs(c.ctx, slog.LevelWarn, "handoff refused", slog.String("from", from), slog.Any("error", err))
		if t != nil {
			c.xmu.Lock()
			t.fail(err)
			c.xmu.Unlock()
		}
		return err
	}
	// Records are stored in batches, in the order they arrived, one
	// transaction (one fsync) for the records that arrived together: a
	// batch is written when the stream has nothing more buffered, or once
	// it holds maxStateBatch records or maxStateBatchBytes of state. A
	// record counts as received (t.got) only once its batch is stored.
	var batch []prospero.Replicated
	var batchBytes int
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		c.xmu.Lock()
		deadline, terr := t.deadline, t.err
		c.xmu.Unlock()
		if terr != nil {
			return terr // aborted meanwhile: nothing more is stored
		}
		ctx, cancel := context.WithDeadline(c.ctx, deadline)
		defer cancel()
		if err := c.storeStates(ctx, batch, func() error { return c.admitTransfer(ctx, k.shard, from, k.epoch) }); err != nil {
			return fail(t, err)
		}
		c.xmu.Lock()
		t.storedBatch(batch)
		c.xmu.Unlock()
		batch, batchBytes = batch[:0], 0
		return nil
	}
	for {
		if r.Buffered() == 0 || len(batch) >= maxStateBatch || batchBytes >= maxStateBatchBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		b, err := readMsg(r)
		if errors.Is(err, io.EOF) && t != nil {
			if err := flush(); err != nil {
				return err
			}
			c.xmu.Lock()
			t.end()
			c.xmu.Unlock()
			return nil
		}
		if err != nil {
			return fail(t, err)
		}
		var rec federation.StateRecord
		if err := rec.UnmarshalBARE(b); err != nil {
			return fail(t, fmt.Errorf("%w: %w", federation.ErrBadRequest, err))
		}
		shard := placement.ShardRef{Group: rec.Group, Index: int(rec.Shard)}
		key := transferKey{from: from, shard: shard, epoch: rec.Epoch}
		if t == nil {
			if t = c.lookupTransfer(key); t == nil {
				return fail(nil, fmt.Errorf("%w: records of %s epoch %d", errUnknownTransfer, shard, rec.Epoch))
			}
			k = key
		}
		c.xmu.Lock()
		terr, nerr := t.err, t.next(k, key, rec.Seq, len(batch))
		c.xmu.Unlock()
		switch {
		case terr != nil:
			return terr
		case nerr != nil:
			return fail(t, nerr)
		}
		id := prospero.Identity{Kind: rec.Actor.Kind, Key: rec.Actor.Key}
		loc, err := c.pl.Locate(id.Kind, id.Key)
		if ref, ok := reminderRecordShard(id); ok {
			loc, err = placement.Location{Shard: ref}, nil
		}
		if (err != nil && loc.Shard == (placement.ShardRef{})) || loc.Shard != shard {
			return fail(t, fmt.Errorf("%w: %q is not in %s", errStaleTransfer, id.String(), shard))
		}
		r, err := handedOff(&rec, id)
		if err != nil {
			return fail(t, err)
		}
		batch = append(batch, r)
		batchBytes += len(rec.State)
	}
}

// A handoff's records are stored at most maxStateBatch (or
// maxStateBatchBytes of state) to a transaction.
const (
	maxStateBatch      = 512
	maxStateBatchBytes = 4 << 20
)

// handedOff is rec, a record of a handoff's stream of id, as this node
// stores it: as a replica of the old owner would, at (the old owner's
// epoch, the record's version in the old owner's store), an actor's
// record and one of the shard's reminder records alike. This node may
// be the old owner's replica, or catching up as one: a copy the old
// owner read before the handoff may reach it after the handoff's
// records, and, older by (epoch, version), does not replace them; should
// the move be aborted, the old owner's later writes are newer and do. A
// record without a version or an epoch is refused (ErrBadRequest).
func handedOff(rec *federation.StateRecord, id prospero.Identity) (prospero.Replicated, error) {
	if rec.Version == 0 || rec.Epoch == 0 {
		return prospero.Replicated{}, fmt.Errorf("%w: record of %q without a version or epoch", federation.ErrBadRequest, id.String())
	}
	return prospero.Replicated{ID: id, Epoch: rec.Epoch - 1, Version: rec.Version,
		Incarnation: rec.Actor.Incarnation, State: rec.State}, nil
}

// dropStaleReminders deletes the reminder records of shard in this
// node's store that a completed handoff from its owner at epoch did not
// bring (keep: the keys it brought). Each goes as a replica's copy goes
// when its owner deletes it (prospero.Replicated.Deleted): the copy read
// here, or an older one by (epoch, version), never a copy of a newer
// epoch, nor one of epoch written since at a higher version.
func (c *Engine) dropStaleReminders(ctx context.Context, shard placement.ShardRef, epoch uint64, keep map[string]bool) error {
	recs, err := reminders.Records(ctx, c.run.Store, ShardKey(shard))
	if err != nil {
		return err
	}
	var stale []prospero.Replicated
	for _, r := range recs {
		if !keep[r.Key] {
			stale = append(stale, prospero.Replicated{ID: prospero.Identity{Kind: reminders.RecordKind, Key: r.Key},
				Epoch: epoch, Version: r.Version, Deleted: true, DeletesEpoch: epoch})
		}
	}
	if len(stale) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err = c.run.Store.ApplyReplicated(stale)
	return err
}

// ---- remote Status and Passivate ----

// Status answers a peer's StatusRequest for an actor this node owns.
func (h fedHandler) Status(ctx context.Context, _ string, m *federation.StatusRequest) (federation.StatusReply, error) {
	ref, err := h.c.ownedRef(m.Actor, m.Epoch)
	if err != nil {
		return federation.StatusReply{}, err
	}
	st, err := h.c.h.StatusHere(ctx, ref)
	if err != nil {
		return federation.StatusReply{}, err
	}
	return federation.StatusReply{State: fedState(st.State), Incarnation: st.Incarnation, Active: st.Active}, nil
}

// Passivate passivates an actor this node owns for a peer.
func (h fedHandler) Passivate(ctx context.Context, _ string, m *federation.PassivateRequest) error {
	ref, err := h.c.ownedRef(m.Actor, m.Epoch)
	if err != nil {
		return err
	}
	return h.c.h.PassivateHere(ctx, ref)
}

// ownedRef checks a peer's request about a, routed by the shard epoch
// epoch: a valid identity of a kind registered here, in a shard this
// node owns and may serve, at an epoch not newer than this node's (a
// newer one means this node's table is behind the sender's: it may have
// lost the shard already). Otherwise it answers why: NOT_OWNER with the
// owner as this node's table shows it, NOT_SERVING, NO_QUORUM,
// UNKNOWN_KIND, INVALID_KEY; and while this node is starting, what
// starting answers.
func (c *Engine) ownedRef(a federation.Actor, epoch uint64) (actor.Ref, error) {
	if err := c.starting(); err != nil {
		return actor.Ref{}, err
	}
	ref := actor.Virtual(a.Kind, a.Key).WithIncarnation(a.Incarnation)
	if err := ref.Check(); err != nil {
		return actor.Ref{}, err
	}
	if !c.h.Hosts(ref.Kind()) {
		return actor.Ref{}, fmt.Errorf("%w: %q", actor.ErrUnknownKind, ref.Kind())
	}
	owner, local, err := c.Route(ref)
	switch {
	case err != nil:
		return actor.Ref{}, err
	case !local:
		return actor.Ref{}, ownerHint{owner}
	}
	if cur := c.EpochOf(prospero.IdentityOf(ref)); epoch > cur {
		return actor.Ref{}, fmt.Errorf("%w: %w: %s routed at epoch %d, this node has %d",
			actor.ErrProcessUnavailable, placement.ErrBehind, ref, epoch, cur)
	}
	return ref, nil
}

var toFedState = map[actor.ReferenceState]federation.ReferenceState{
	actor.Unknown:            federation.ReferenceStateUnknown,
	actor.Valid:              federation.ReferenceStateValid,
	actor.Dormant:            federation.ReferenceStateDormant,
	actor.ActorTerminated:    federation.ReferenceStateActorTerminated,
	actor.ProcessUnavailable: federation.ReferenceStateProcessUnavailable,
}

func fedState(s actor.ReferenceState) federation.ReferenceState { return toFedState[s] }

func actorState(s federation.ReferenceState) actor.ReferenceState {
	for a, f := range toFedState {
		if f == s {
			return a
		}
	}
	return actor.Unknown
}

// maxOwnerHops bounds how often a remote Status or Passivate follows a
// NOT_OWNER answer to another node before it reports the actor's node
// unavailable.
const maxOwnerHops = 4

// onOwner runs op on the node that owns ref: here (here is called) or on
// the owner by this node's table, following a NOT_OWNER answer's hint
// (or this node's table once it changed) a few times. It returns
// errUnreachable-wrapped errors (matching actor.ErrProcessUnavailable)
// when the owner cannot be reached or cannot serve. The requests to other
// nodes and the waits between them share one budget: ctx's deadline or,
// when it has none, budget (not one budget per hop).
func (c *Engine) onOwner(ctx context.Context, budget time.Duration, ref actor.Ref, here func() error, remote func(ctx context.Context, owner string, epoch uint64) error) (string, error) {
	rctx, cancel := bounded(ctx, budget)
	defer cancel()
	var hint string
	for hop := 0; ; hop++ {
		owner, local, err := c.Route(ref)
		if err != nil {
			return "", err
		}
		if local {
			return c.name, here()
		}
		if hint != "" && hint != c.name {
			owner = hint
		}
		err = remote(rctx, owner, c.EpochOf(prospero.IdentityOf(ref)))
		var fe *federation.Error
		if !errors.As(err, &fe) || fe.Code != federation.CodeNotOwner {
			return owner, err
		}
		if hop+1 >= maxOwnerHops {
			return owner, fmt.Errorf("%w: %s: owner not found after %d tries: %w", actor.ErrProcessUnavailable, ref, maxOwnerHops, err)
		}
		if fe.OwnerHint == "" || fe.OwnerHint == owner {
			if werr := c.awaitChange(rctx, 50*time.Millisecond); werr != nil {
				return owner, werr
			}
			hint = ""
		} else {
			hint = fe.OwnerHint
		}
	}
}

// Status is tempest.Node.Status in a cluster.
func (c *Engine) Status(ctx context.Context, ref actor.Ref) (Status, error) {
	var st Status
	owner, err := c.onOwner(ctx, federation.DefaultBudget, ref, func() (err error) {
		st, err = c.h.StatusHere(ctx, ref)
		return err
	}, func(ctx context.Context, owner string, epoch uint64) error {
		r, err := c.fed.Status(ctx, owner, &federation.StatusRequest{Epoch: epoch,
			Actor: federation.Actor{Kind: ref.Kind(), Key: ref.Key(), Incarnation: ref.Incarnation()}})
		if err != nil {
			return err
		}
		st = Status{Kind: ref.Kind(), Key: ref.Key(), State: actorState(r.State), Node: owner,
			Incarnation: r.Incarnation, Active: r.Active}
		return nil
	})
	if err != nil && errors.Is(err, actor.ErrProcessUnavailable) {
		// The owner cannot be reached or cannot serve now: the same answer
		// a node gives for an actor of a shard it cannot serve.
		return Status{Kind: ref.Kind(), Key: ref.Key(), State: actor.ProcessUnavailable, Node: owner}, nil
	}
	return st, err
}

// remotePassivate passivates ref on its owner, this node or another.
func (c *Engine) remotePassivate(ctx context.Context, ref actor.Ref) error {
	_, err := c.onOwner(ctx, 30*time.Second, ref, func() error { return c.h.PassivateHere(ctx, ref) },
		func(ctx context.Context, owner string, epoch uint64) error {
			return c.fed.Call(ctx, owner, &federation.PassivateRequest{Epoch: epoch, BudgetNs: budgetOf(ctx, 0),
				Actor: federation.Actor{Kind: ref.Kind(), Key: ref.Key(), Incarnation: ref.Incarnation()}})
		})
	return err
}

// Counters are the engine's federation counters (tempest.FederationStats
// documents them).
type Counters struct {
	federation.Stats
	HandoffsAborted, HandoffsPromoted     uint64
	Hydrated, HydrateBusy, HydrateRetries uint64
	MailBusy, StreamsRefused              uint64
}

// Counters returns the engine's federation counters.
func (c *Engine) Counters() Counters {
	if c.fed == nil {
		return Counters{}
	}
	return Counters{Stats: c.fed.Stats(), HandoffsAborted: c.aborts.Load(), HandoffsPromoted: c.promoted.Load(),
		Hydrated: c.hydrated.Load(), HydrateBusy: c.hydrateBusy.Load(), HydrateRetries: c.hydrateRetries.Load(),
		MailBusy: c.mailBusy.Load(), StreamsRefused: c.streamsRefused.Load()}
}
