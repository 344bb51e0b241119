package wire

import (
	"context"
	"errors"
	"github.com/tempest-actors/tempest/clock"
	"net"

	"github.com/tempest-actors/tempest/actor"
)

// Transport errors. They are sentinels to branch on with errors.Is.
// ErrQueueFull also matches actor.ErrRefused (the frame was definitely not
// sent) and ErrUnavailable matches actor.ErrProcessUnavailable (the peer's
// node is unreachable), so the layers above can pass them on unchanged.
var (
	// ErrClosed: the transport (or stream listener) was closed.
	ErrClosed = errors.New("wire: transport closed")
	// ErrQueueFull: the link's bounded send queue for that lane is full;
	// the frame was not queued (backpressure; definitely not delivered).
	ErrQueueFull error = &kindError{"wire: send queue full", actor.ErrRefused}
	// ErrFrameTooLarge: the frame exceeds Config.MaxFrameSize.
	ErrFrameTooLarge = errors.New("wire: frame too large")
	// ErrUnavailable: there is no link to the peer and none can be made
	// right now (the last attempt failed and the back-off has not passed,
	// or the peer cannot be resolved), or the link went down.
	ErrUnavailable error = &kindError{"wire: peer unavailable", actor.ErrProcessUnavailable}
	// ErrLinkLost: the link to the peer went down while an ask sent on it
	// was unanswered, so whether the peer ran it is unknown. It matches
	// ErrUnavailable (and so actor.ErrProcessUnavailable); a sender must
	// not send the ask again, as it would run twice if it ran.
	ErrLinkLost error = &kindError{"wire: link lost, outcome unknown", ErrUnavailable}
	// ErrNotMember: the peer refused this node's Hello because it does
	// not know this node as a cluster member (Config.Admit). It matches
	// ErrUnavailable: a node that is joining is admitted once the peer
	// learns of it, and the link is tried again after the back-off.
	ErrNotMember error = &kindError{"wire: peer does not know this node as a member", ErrUnavailable}
	// ErrSelf: a node tried to send to or dial itself.
	ErrSelf = errors.New("wire: peer is this node")
)

// kindError is a sentinel that also matches the actor-level sentinel it
// refines.
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

// Lane identifies one ordered channel of a link. Lane 0 is the control
// lane (Prospero policy: handoff, state transfer, hydration, deadlines);
// lanes 1..K are mail lanes. Each lane is an independent QUIC stream, so a
// slow or blocked lane never delays another.
type Lane uint8

// ControlLane is the lane for supervisor traffic. It never queues behind
// actor mail.
const ControlLane Lane = 0

// MaxMailLanes bounds Config.MailLanes.
const MaxMailLanes = 64

// MailLane returns the mail lane for a recipient hash when a link has k
// mail lanes: every frame for one recipient uses the same lane, which is
// what keeps per-sender, per-recipient FIFO.
func MailLane(key uint64, k int) Lane {
	if k <= 0 {
		k = DefaultMailLanes
	}
	// Fold the high bits in so keys that differ only there still spread.
	key ^= key >> 32
	return Lane(1 + key%uint64(k))
}

// Handler receives the frames that arrive from peers.
//
// It is called from the transport's reader goroutines: concurrently for
// different peers and lanes, sequentially (in send order) for one lane of
// one peer. The frame slice is only valid until Handler returns; a handler
// that keeps the bytes must copy them. A handler must not block for long:
// it holds back every later frame on its lane (use an admission check and
// refuse instead). Returning a non-nil error marks the frame malformed: the
// transport resets that lane's stream with CodeMalformedFrame, counts and
// logs it; the sender reopens the lane and the rest of the link keeps
// working.
type Handler func(from string, lane Lane, frame []byte) error

// BatchHandler receives, in one call, a run of frames that arrived on one
// lane of one peer together: the frames the reader already held in its
// buffer when it got to them, in send order, at most MaxBatchFrames. It
// lets a receiver pay once per run what Handler pays per frame (a lane
// lock, counters, a mailbox reservation and a wake-up per recipient).
//
// The same rules as for Handler apply: every frame of the run is valid
// only until the call returns; a non-nil error marks a frame malformed and
// resets the lane, and the frames before it must have been handled (the
// ones after it are dropped with the stream, as after a Handler error).
type BatchHandler func(from string, lane Lane, frames [][]byte) error

// MaxBatchFrames bounds the frames of one BatchHandler call. A run's tells
// are admitted once the run is decoded, so the bound also bounds how long
// the first of them waits for the rest (64 bodies: some 20 µs here).
const MaxBatchFrames = 64

// LinkEvent reports a link to a peer going up or down.
type LinkEvent struct {
	Peer string
	// Up is true when a verified link is established and false when it is
	// lost. After a down event every frame sent to Peer before it has an
	// unknown fate, and nothing queued before it is sent after it: callers
	// fail their pending asks to that peer with a process-unavailable
	// error at once.
	Up bool
	// Version and ManifestDigest are the peer's Hello fields (up events).
	Version        uint64
	ManifestDigest []byte
	// Err says why a link went down (nil on a local close).
	Err error
}

// Transport moves opaque frames between named nodes and carries
// bidirectional service streams (raft) over the same links.
//
// All methods are safe for concurrent use.
type Transport interface {
	// Name is this node's name.
	Name() string
	// Send queues frame for peer on the mail lane chosen by key (a hash
	// of the recipient; see MailLane). It never blocks on the network: it
	// copies frame (the caller keeps ownership) into the lane's bounded
	// queue, starting a link if there is none, and returns ErrQueueFull,
	// ErrFrameTooLarge, ErrUnavailable, ErrSelf or ErrClosed when it cannot.
	// A nil error means queued, not delivered.
	Send(peer string, key uint64, frame []byte) error
	// SendControl is Send on the control lane.
	SendControl(peer string, frame []byte) error
	// DialStream opens a bidirectional stream to the listener for service
	// on peer, over the peer link (establishing it if needed).
	DialStream(ctx context.Context, peer, service string) (net.Conn, error)
	// ListenStream returns the listener for incoming streams of service.
	// Only one listener per service may be open at a time.
	ListenStream(service string) (net.Listener, error)
	// Disconnect closes the link to peer, if there is one, for instance
	// because membership declared the peer dead: both sides get a down
	// event at once instead of after the idle timeout. A later Send or
	// DialStream connects again.
	Disconnect(peer string)
	// Close closes every link and listener and stops every goroutine the
	// transport started. It is idempotent.
	Close() error
}

// WaitSender is implemented by transports whose sends can wait for room
// in a full lane queue instead of refusing (both QUIC and Mem do). Bulk
// producers such as state transfer use it; actor mail uses Send and
// treats ErrQueueFull as a refusal.
type WaitSender interface {
	// SendWait is Send that waits while the lane queue is full; when ctx
	// ends first it returns ErrQueueFull wrapping ctx.Err().
	SendWait(ctx context.Context, peer string, key uint64, frame []byte) error
	// SendControlWait is SendWait on the control lane.
	SendControlWait(ctx context.Context, peer string, frame []byte) error
}

// Stream error codes used when a lane or service stream is reset. They are
// visible to the peer as quic.StreamError codes.
const (
	CodeFrameTooLarge  uint64 = 0x101
	CodeMalformedFrame uint64 = 0x102
	CodeUnknownService uint64 = 0x103
	CodeBadLane        uint64 = 0x104
	CodeClosing        uint64 = 0x105
)

// Connection close codes.
const (
	closeNormal     = 0x0
	closeDuplicate  = 0x201 // a simultaneous dial lost the tie-break
	closeBadHello   = 0x202 // Hello missing, malformed or not matching the certificate
	closeReplaced   = 0x203 // a newer link to the same peer replaced this one
	closeShutdown   = 0x204 // the node is shutting down
	closeDisconnect = 0x205 // Disconnect was called
)

// Stats are cumulative transport counters.
type Stats struct {
	FramesSent, FramesReceived uint64
	BytesSent, BytesReceived   uint64
	// Writes counts stream writes; FramesSent/Writes is the coalescing
	// factor.
	Writes uint64
	// QueueFull counts sends refused with ErrQueueFull.
	QueueFull uint64
	// Dropped counts queued frames discarded because their link went down.
	Dropped uint64
	// Oversized and Malformed count inbound frames that reset a stream.
	Oversized, Malformed uint64
	// HelloRejected counts inbound connections refused at the Hello for
	// a bad Hello: malformed, naming another node than the certificate,
	// or of another protocol version.
	HelloRejected uint64
	// NotMember counts inbound connections refused at the Hello because
	// Config.Admit refused the certified peer (NOT_MEMBER).
	NotMember uint64
	// TLSRejected counts inbound handshakes refused because the client's
	// certificate does not verify against the cluster CA (none, another
	// CA's, expired).
	TLSRejected        uint64
	LinksUp, LinksDown uint64
	// SendsRefused counts datagrams the kernel refused to send with EPERM
	// (a firewall rule dropping them on the way out), counted as lost
	// rather than ending their link (see udp.go).
	SendsRefused uint64
}

// Clock is the time source, the project's one (package clock): the real
// one in production, a fake in tests.
type Clock = clock.Clock

// RealClock returns the wall clock.
func RealClock() Clock { return clock.Real{} }

// nodeAddr is the net.Addr of a peer on a service stream: its node name.
type nodeAddr string

func (a nodeAddr) Network() string { return "tempest" }
func (a nodeAddr) String() string  { return string(a) }
