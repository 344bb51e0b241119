package placement

import (
	"net"
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
	return &SplitTransport{NetworkTransport: main, hb: hb, answered: map[raft.ServerID]time.Time{}}
}

// SplitTransport is a transport with AppendEntries heartbeats diverted
// to a second one (see SplitHeartbeats).
// It keeps every optional interface main has (WithClose,
// WithPreVote): raft enables pre-vote only if the transport supports it.
type SplitTransport struct {
	*raft.NetworkTransport
	hb *raft.NetworkTransport

	mu       sync.Mutex
	accepted time.Time                   // last heartbeat this node accepted (receipt)
	answered map[raft.ServerID]time.Time // last answer to a heartbeat it sent

	// raft handles heartbeats on the transport's goroutines, not its
	// own, and Shutdown does not wait for them: a heartbeat in flight
	// can still write the term to the stores. hbMu is held (read) for
	// each one; StopHeartbeats takes it to end them before the stores
	// close.
	hbMu      sync.RWMutex
	hbStopped bool
}

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
)

// HeartbeatClock is implemented by transports that know when this node
// last accepted a heartbeat from a leader. A Node whose transport
// implements it anchors its follower lease there instead of at raft's
// LastContact, which also counts votes granted and appends, stamped
// after their fsync: an append sent before a node was cut off and
// written long after would renew its lease late.
type HeartbeatClock interface {
	// LastHeartbeat is when (wall clock, with its monotonic reading) the
	// last heartbeat that raft accepted (Success) was received; zero if
	// none. Safe for concurrent use.
	LastHeartbeat() time.Time
	// LastAnswer is when peer last answered a heartbeat this node sent
	// (wall clock); zero if never. Safe for concurrent use.
	LastAnswer(peer raft.ServerID) time.Time
}

// SetHeartbeatHandler hands raft's heartbeat handler to main, noting
// the receipt of every heartbeat raft accepts (LastHeartbeat).
func (s *SplitTransport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	if cb == nil {
		s.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	s.NetworkTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		at := time.Now()
		out := rpc.RespChan
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
					s.accepted = at
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

// LastHeartbeat implements HeartbeatClock.
func (s *SplitTransport) LastHeartbeat() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
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
		err := s.hb.AppendEntries(id, target, args, resp)
		if err == nil {
			now := time.Now()
			s.mu.Lock()
			s.answered[id] = now
			s.mu.Unlock()
		}
		return err
	}
	return s.NetworkTransport.AppendEntries(id, target, args, resp)
}

// Close closes both transports.
func (s *SplitTransport) Close() error {
	err := s.NetworkTransport.Close()
	if err2 := s.hb.Close(); err == nil {
		err = err2
	}
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
