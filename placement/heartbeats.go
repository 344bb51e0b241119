package placement

import (
	"errors"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// SplitHeartbeats returns a raft transport that sends raft's heartbeats
// through hb and everything else through main. A network transport has
// one I/O timeout for every RPC; heartbeats are tiny and must fail fast
// (a dead peer is noticed by failed heartbeats, see Config.DownAfter),
// while appends wait for the follower's fsync and snapshots for a
// transfer, which may take seconds on a busy machine. Give hb a timeout
// of Config.HeartbeatRPCTimeout and a stream layer whose listener never
// accepts (HeartbeatStreamLayer): every inbound RPC, heartbeats of other
// nodes included, arrives through main. Closing the returned transport
// closes both.
func SplitHeartbeats(main, hb *raft.NetworkTransport) *SplitTransport {
	s := &SplitTransport{NetworkTransport: main, hb: hb, created: time.Now(),
		answered: map[raft.ServerID]time.Time{}, answeredSent: map[raft.ServerID]time.Time{},
		sending: map[uint64]int{}}
	s.sent = sync.NewCond(&s.mu)
	return s
}

// SplitTransport is a transport with AppendEntries heartbeats diverted
// to a second one (see SplitHeartbeats).
// It keeps every optional interface main has (WithClose,
// WithPreVote): raft enables pre-vote only if the transport supports it.
type SplitTransport struct {
	*raft.NetworkTransport
	hb *raft.NetworkTransport

	mu       sync.Mutex
	accepted time.Time // last heartbeat this node accepted (receipt)
	// acceptedTerm is that heartbeat's term.
	acceptedTerm uint64
	answered     map[raft.ServerID]time.Time // last answer to a heartbeat it sent
	// answeredSent is, by peer, when the last heartbeat it accepted
	// (answered Success) was sent: see QuorumAnswered.
	answeredSent map[raft.ServerID]time.Time
	// created, renewals, floor and sending: see Witness.
	created  time.Time
	renewals termTimes
	floor    uint64
	sending  map[uint64]int // heartbeats being sent, by term
	sent     *sync.Cond     // on mu: a send ended

	// raft handles heartbeats on the transport's goroutines, not its
	// own, and Shutdown does not wait for them: a heartbeat in flight
	// can still write the term to the stores. hbMu is held (read) for
	// each one; StopHeartbeats takes it to end them before the stores
	// close.
	hbMu      sync.RWMutex
	hbStopped bool

	layers []raft.StreamLayer // AbortOnStepDown; guarded by mu
}

// AbortOnStepDown names the stream layers of main and hb (as built by
// NewStreamLayer and HeartbeatStreamLayer, perhaps wrapped by
// GuardStreamLayer): when this node stops leading, the streams they
// dialed are aborted (see streamLayer.abortDialed). Call it before raft
// starts.
func (s *SplitTransport) AbortOnStepDown(layers ...raft.StreamLayer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.layers = append(s.layers, layers...)
}

// abortRequests implements requestAborter.
func (s *SplitTransport) abortRequests() {
	s.mu.Lock()
	layers := slices.Clone(s.layers)
	s.mu.Unlock()
	for _, l := range layers {
		if a, ok := l.(dialAborter); ok {
			a.abortDialed()
		}
	}
}

// requestAborter is a transport that can abort the RPCs this node has in
// flight (SplitTransport, AbortOnStepDown).
type requestAborter interface{ abortRequests() }

// StopHeartbeats waits for the heartbeats being handled and refuses the
// rest unanswered: call it after raft shut down, before its stores close.
func (s *SplitTransport) StopHeartbeats() {
	s.hbMu.Lock()
	s.hbStopped = true
	s.hbMu.Unlock()
}

var (
	_ raft.Transport   = (*SplitTransport)(nil)
	_ raft.WithClose   = (*SplitTransport)(nil)
	_ raft.WithPreVote = (*SplitTransport)(nil)
	_ HeartbeatClock   = (*SplitTransport)(nil)
	_ LeaseWitness     = (*SplitTransport)(nil)
)

// errBelowFloor refuses to send a heartbeat of a term this node has
// witnessed the end of (see Witness).
var errBelowFloor = errors.New("placement: heartbeat of a term older than the one witnessed")

// LeaseWitness is implemented by transports that can bound when the
// heartbeats of a term could last have renewed a lease: those this node
// accepted as a follower and those it sent as a leader. Node.Witness
// answers a new leader's question with it (see the package
// documentation, "A crashed leader's fence").
type LeaseWitness interface {
	// Witness returns an instant (wall clock, with its monotonic
	// reading) no earlier than the receipt of every heartbeat of a term
	// below term that this node accepted, and the end of the sending of
	// every one it sent (it waits for those in flight), since its process
	// started (or the start itself, which bounds what an earlier process
	// did). From the call on, it accepts and sends no heartbeat of a term
	// below term, so the bound holds for good. Safe for concurrent use.
	Witness(term uint64) time.Time
	// QuorumAnswered returns the need-th latest instant at which a
	// heartbeat was sent that one of voters then accepted (each voter
	// counted once, at its latest); zero if fewer than need of them
	// ever accepted one. Safe for concurrent use.
	QuorumAnswered(voters []raft.ServerID, need int) time.Time
}

// termTimes keeps, for the last few terms, the latest instant noted in
// each; older terms fold into one instant (later is the safe side).
type termTimes struct {
	terms  []uint64
	times  []time.Time
	folded time.Time
}

const keptTerms = 8

func (tt *termTimes) note(term uint64, at time.Time) {
	i, ok := slices.BinarySearch(tt.terms, term)
	if ok {
		if at.After(tt.times[i]) {
			tt.times[i] = at
		}
		return
	}
	tt.terms = slices.Insert(tt.terms, i, term)
	tt.times = slices.Insert(tt.times, i, at)
	if len(tt.terms) > keptTerms {
		if tt.times[0].After(tt.folded) {
			tt.folded = tt.times[0]
		}
		tt.terms, tt.times = tt.terms[1:], tt.times[1:]
	}
}

// before is the latest instant noted in a term below term (folded
// terms included); zero if none.
func (tt *termTimes) before(term uint64) time.Time {
	latest := tt.folded
	for i, t := range tt.terms {
		if t < term && tt.times[i].After(latest) {
			latest = tt.times[i]
		}
	}
	return latest
}

// Witness implements LeaseWitness.
func (s *SplitTransport) Witness(term uint64) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if term > s.floor {
		s.floor = term
	}
	// A send of an older term that passed the floor may still be on its
	// way out (a dial, a write): its end bounds its receipt.
	for s.sendingBelow(term) {
		s.sent.Wait()
	}
	at := s.renewals.before(term)
	if s.created.After(at) {
		at = s.created
	}
	return at
}

// sendingBelow reports whether a heartbeat of a term below term is being
// sent. Called with s.mu held.
func (s *SplitTransport) sendingBelow(term uint64) bool {
	for t, n := range s.sending {
		if t < term && n > 0 {
			return true
		}
	}
	return false
}

// QuorumAnswered implements LeaseWitness.
func (s *SplitTransport) QuorumAnswered(voters []raft.ServerID, need int) time.Time {
	if need <= 0 {
		return time.Time{}
	}
	s.mu.Lock()
	sent := make([]time.Time, 0, len(voters))
	for _, v := range voters {
		if at, ok := s.answeredSent[v]; ok {
			sent = append(sent, at)
		}
	}
	s.mu.Unlock()
	if len(sent) < need {
		return time.Time{}
	}
	slices.SortFunc(sent, func(a, b time.Time) int { return b.Compare(a) })
	return sent[need-1]
}

// HeartbeatClock is implemented by transports that know when this node
// last accepted a heartbeat from a leader. A Node whose transport
// implements it anchors its follower lease there instead of at raft's
// LastContact, which also counts votes granted and appends, stamped
// after their fsync: an append sent before a node was cut off and
// written long after would renew its lease late.
type HeartbeatClock interface {
	// LastHeartbeatTerm is when (wall clock, with its monotonic
	// reading) the last heartbeat that raft accepted (Success) was
	// received, and its term; zero if none. Safe for concurrent use.
	LastHeartbeatTerm() (time.Time, uint64)
	// LastAnswer is when peer last answered a heartbeat this node sent
	// (wall clock); zero if never. Safe for concurrent use.
	LastAnswer(peer raft.ServerID) time.Time
}

// SetHeartbeatHandler hands raft's heartbeat handler to main, noting
// the receipt of every heartbeat raft accepts (LastHeartbeatTerm).
func (s *SplitTransport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	if cb == nil {
		s.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	s.NetworkTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		at := time.Now()
		out := rpc.RespChan
		var term uint64
		if req, ok := rpc.Command.(*raft.AppendEntriesRequest); ok {
			term = req.Term
			// Noted before raft sees it, as if accepted, so that a Witness
			// from now on counts it; one of a witnessed-out term is
			// refused here, whatever raft's own term is yet.
			s.mu.Lock()
			floor := s.floor
			if req.Term >= floor {
				s.renewals.note(req.Term, at)
			}
			s.mu.Unlock()
			if req.Term < floor {
				out <- raft.RPCResponse{Response: &raft.AppendEntriesResponse{Term: floor}}
				return
			}
		}
		ch := make(chan raft.RPCResponse, 1)
		rpc.RespChan = ch
		s.hbMu.RLock()
		if s.hbStopped {
			s.hbMu.RUnlock()
			return // shut down: unanswered, as raft leaves it then
		}
		cb(rpc) // answers before it returns (or not at all, shutting down)
		s.hbMu.RUnlock()
		select {
		case r := <-ch:
			if resp, ok := r.Response.(*raft.AppendEntriesResponse); ok && r.Error == nil && resp.Success {
				s.mu.Lock()
				if at.After(s.accepted) {
					s.accepted, s.acceptedTerm = at, term
				}
				s.mu.Unlock()
			}
			out <- r
		default:
		}
	})
}

// LastAnswer implements HeartbeatClock.
func (s *SplitTransport) LastAnswer(peer raft.ServerID) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answered[peer]
}

// LastHeartbeatTerm implements HeartbeatClock.
func (s *SplitTransport) LastHeartbeatTerm() (time.Time, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted, s.acceptedTerm
}

// isHeartbeat reports whether req is one of raft's heartbeats: term and
// leader only, no entries, no log position, no commit index. (An append
// that looks like this carries nothing either, so sending it the fast way
// loses nothing.)
func isHeartbeat(req *raft.AppendEntriesRequest) bool {
	return len(req.Entries) == 0 && req.PrevLogEntry == 0 && req.PrevLogTerm == 0 && req.LeaderCommitIndex == 0
}

// AppendEntries sends heartbeats through hb, other appends through main.
func (s *SplitTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if isHeartbeat(args) {
		sent := time.Now()
		s.mu.Lock()
		if args.Term < s.floor {
			s.mu.Unlock()
			return errBelowFloor
		}
		s.sending[args.Term]++
		s.mu.Unlock()
		err := s.hb.AppendEntries(id, target, args, resp)
		now := time.Now()
		s.mu.Lock()
		// Noted at the end of the send: a receipt is before it, or (the
		// write went out, the answer did not come) at most a delivery
		// delay after it.
		s.renewals.note(args.Term, now)
		if s.sending[args.Term]--; s.sending[args.Term] == 0 {
			delete(s.sending, args.Term)
		}
		s.sent.Broadcast()
		if err == nil {
			s.answered[id] = now
			if resp.Success && resp.Term == args.Term && sent.After(s.answeredSent[id]) {
				s.answeredSent[id] = sent
			}
		}
		s.mu.Unlock()
		return err
	}
	return s.NetworkTransport.AppendEntries(id, target, args, resp)
}

// Close closes both transports and the connections they pooled: raft's
// Close leaves those open, and with them the goroutine of each peer that
// reads one.
func (s *SplitTransport) Close() error {
	err := s.NetworkTransport.Close()
	if err2 := s.hb.Close(); err == nil {
		err = err2
	}
	s.NetworkTransport.CloseStreams()
	s.hb.CloseStreams()
	return err
}

// HeartbeatStreamLayer is the stream layer of the heartbeat transport of
// SplitHeartbeats: it dials like NewStreamLayer(d, nil, service) and
// never accepts (Accept blocks until Close); Addr is addr.
func HeartbeatStreamLayer(d StreamDialer, addr net.Addr, service string) raft.StreamLayer {
	if service == "" {
		service = RaftService
	}
	return &streamLayer{Listener: &silentListener{addr: addr, done: make(chan struct{})}, dialer: d, service: service}
}

// silentListener is a net.Listener that accepts nothing.
type silentListener struct {
	addr net.Addr
	once sync.Once
	done chan struct{}
}

func (l *silentListener) Accept() (net.Conn, error) {
	<-l.done
	return nil, net.ErrClosed
}

func (l *silentListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *silentListener) Addr() net.Addr { return l.addr }
