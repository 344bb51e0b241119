// Package wire is BAREWire, the node-to-node transport of Tempest: it
// moves frames (BARE-encoded envelopes, opaque at this layer) between named
// nodes over QUIC with mutual TLS, and carries bidirectional service
// streams (raft RPC) over the same connections.
//
// # Links
//
// A node runs one quic.Transport on one UDP socket (default port 7947)
// and keeps at most one QUIC connection, its link, to each peer. A link
// starts on demand: the first Send or DialStream to a peer resolves its
// address through Config.Resolve and dials. The dialer opens a stream and
// sends a Hello (node name, protocol version, manifest digest; see
// envelope.bare); the acceptor checks that the name is the one its TLS
// certificate carries and answers with a HelloReply. Nothing a peer sends
// is read, let alone delivered, before its Hello is verified.
//
// When both nodes dial each other at once, the connection dialed by the
// node with the lexicographically lower name wins: that node answers the
// other's Hello with DUPLICATE while its own dial is in flight or
// established, and the loser adopts the winner's connection. A node
// dials only when it has no link, so any other inbound connection replaces
// the existing link (the peer restarted or lost it).
//
// Links report up and down through Config.Events. A down event means every
// frame sent to that peer before it has an unknown fate and nothing queued
// before it will be sent after it: callers fail their pending asks to that
// peer at once (process unavailable). Disconnect cuts a link on purpose,
// for instance when membership declares the peer dead, so callers need
// not wait for the QUIC idle timeout. After a failed dial the link backs
// off (Config.BackoffMin doubling to BackoffMax, on the injected clock);
// during the back-off Send fails fast with ErrUnavailable. A restarted node
// keeps its stateless reset key (derived from its private key unless
// given), so its peers' stale connections are reset on their next packet
// instead of waiting for the idle timeout.
//
// # TLS
//
// TLS 1.3 only, ALPN "tempest/1", 0-RTT off (no early data, no session
// tickets). Both sides present a certificate issued by the cluster CA (see
// NewCA, CA.Issue and the tempest certs command); the node name is the
// certificate's first DNS name and is matched exactly. The dialer checks
// the acceptor's certificate names the peer it dialed; the acceptor checks
// the client certificate chains to the CA and then that the Hello claims
// the same name. Expired, not-yet-valid, self-signed and foreign-CA
// certificates fail the handshake. SetCredentials rotates the certificate
// and CA pool for new connections.
//
// # Lanes and framing
//
// A link has one control lane (lane 0, supervisor policy) and K mail lanes
// (lanes 1..K, Config.MailLanes, default 4). Each lane is a long-lived
// unidirectional QUIC stream per direction, so QUIC's per-stream flow
// control keeps a stalled lane from blocking the others: the control lane
// never waits behind actor mail, and a slow recipient only delays the
// recipients that hash to its lane. Send picks the mail lane by a hash of
// the recipient (MailLane), which keeps per-sender, per-recipient FIFO.
//
// A lane stream begins with one byte, the lane number; then frames follow,
// each a uvarint length (BARE's uint: minimal LEB128) and that many bytes.
// The receiver checks the length against Config.MaxFrameSize (default
// 4 MiB) before reading or allocating. An oversized frame, a malformed
// length or a frame the Handler rejects resets that stream with
// CodeFrameTooLarge or CodeMalformedFrame; it is counted (Stats) and
// logged, the sender reopens the lane on a new stream, and the rest of
// the link and all other peers carry on.
//
// Writes are coalesced. Send appends the framed bytes to the lane's queue
// under a mutex and wakes the lane's writer goroutine; the writer takes
// everything queued so far and hands it to QUIC in one stream write. An
// idle lane therefore flushes a lone frame at once (no timer), while a busy
// one writes thousands of frames per write. The queue is bounded
// (Config.LaneQueueBytes per lane): when QUIC flow control holds the
// writer back and the queue is full, Send returns ErrQueueFull instead of
// buffering without bound; SendWait waits for room instead.
//
// # Service streams
//
// DialStream opens a bidirectional stream on the peer link and names a
// service in its first bytes; ListenStream returns the net.Listener that
// receives the streams of one service. Raft's stream layer is built on
// this, so raft shares the port, the link and the TLS identity.
//
// # Mail
//
// Mailer carries actor mail on top of a Transport. Every frame on a mail
// lane is one Envelope of envelope.bare: Tell, Ask, Reply, Refused, or
// TracedTell (a Tell carrying a W3C trace context, sent for a sampled
// trace). A
// recipient crosses as an ActorID: kind/key for a virtual actor, kind
// "@node" and the decimal id as key for a spawned one (see ActorIDOf),
// with the incarnation the reference is pinned to. The lane is MailLane of
// a hash of the recipient, so per-sender, per-recipient FIFO holds.
//
// The message itself travels as a tag (u32) and a body. A Registry maps Go
// types to tags and codecs: Register[T] for a baregen struct is one line,
// RegisterCodec takes hand-written functions. Only mail to another node is
// encoded; a local send never touches the registry. A type without a tag
// is refused at the sender (ErrUnregistered); a tag the receiver does not
// know is answered Refused{UNKNOWN_KIND}, which the asker sees as
// actor.ErrUnknownKind. Tags above MaxUserTag are reserved: TagNil is a nil
// reply, TagError an error reply. An actor's ReplyError crosses as the
// code of the actor sentinel it matches and its message, plus the code of
// the application sentinel it matches (Registry.RegisterError) and, when
// it is or wraps a value of a registered message type, that value in its
// codec (see RemoteError). So errors.Is(err, actor.ErrRefused),
// errors.Is(err, ErrInsufficientFunds) and errors.As(err, &overdraft)
// answer on the asker's node as on the owner's; an error that is neither
// keeps its text.
//
// An ask carries the caller's id and the time left to its deadline, in
// nanoseconds at sending. The receiver refuses an ask with no time left
// (EXPIRED) without running it, and otherwise gives it the local deadline
// now + remaining; the scheduler drops it unrun if it is still queued then.
// The caller's pending-ask table completes an ask exactly once: on its
// Reply or Refused, on a link-down event for that peer
// (ErrLinkLost, matching ErrUnavailable and actor.ErrProcessUnavailable,
// at once: the ask was handed to the link, so whether the peer ran it is
// unknown), on the periodic deadline sweep, or on Close. A send the
// transport refuses at once (ErrUnavailable: no link and none can be made
// now) leaves nothing pending: Ask returns the error, and the frame never
// left. A refusal maps to the actor
// sentinel of its reason (RefusedError): MAILBOX_FULL and NODE_OVERLOADED
// to actor.ErrRefused, UNKNOWN_KIND to actor.ErrUnknownKind, EXPIRED to
// actor.ErrDeadlineExceeded, TERMINATED_INCARNATION to
// actor.ErrActorTerminated, NOT_OWNER to ErrNotOwner with the owner hint.
// A refused tell comes back as Refused{id 0} with the sender and the
// message, and is reported through MailConfig.Undelivered so the sending
// actor gets an actor.Undelivered. An ask the receiver admitted and then
// refused without running it (its reply function given NotRun(refusal))
// is answered Refused too, never Reply, so its sender can tell it from an
// error the actor replied.
//
// Backpressure: Tell and Ask never wait for the network. A full lane queue
// refuses the send with ErrQueueFull (actor.ErrRefused); TellWait waits
// instead, for bulk producers. On the receiving side mail is admitted by
// the recipient's bounded mailbox (LocalDelivery), and the bytes of asks
// admitted but not answered are bounded by MailConfig.MaxInboundBytes
// (beyond it: Refused{NODE_OVERLOADED}). A frame whose envelope does not
// decode makes Handle return an error, so the transport resets that lane
// and counts it; a body that does not decode is refused UNKNOWN_KIND and
// the lane carries on. Mailer.Stats counts all of it.
//
// Wiring (the node does this; the scheduler implements LocalDelivery):
//
//	reg := wire.NewRegistry()
//	_ = wire.Register[Greeting](reg, 100)
//	m, _ := wire.NewMailer(wire.MailConfig{Registry: reg, Local: sched,
//		Complete: func(id uint64, v any, err error) { sched.CompleteAsk(id, v, err) }})
//	t, _ := wire.NewQUIC(wire.Config{..., Handler: m.Handle, HandleBatch: m.HandleBatch, Events: m.LinkEvent})
//	m.Attach(t)
//	_ = m.Tell("node-2", actor.Virtual("greeter", "en"), actor.Ref{}, Greeting{Text: "hi"})
//
// # Goroutines and ownership
//
// The transport owns every goroutine it starts (accept loop, handshakes,
// one writer per lane and link, one reader per inbound lane stream, one
// watcher per link, the event dispatcher) and Close stops them all and
// waits. The Handler runs on reader goroutines: concurrently across
// lanes and peers, in order within a lane. Its frame argument is only valid
// until it returns. It must not block for long, and must return for Close
// to finish. Send copies the frame, so callers keep their buffer.
//
// With Config.HandleBatch set, a reader hands over a run of frames per
// call instead: the frames already whole in its buffer when it got to
// them (at most MaxBatchFrames), valid together until the call returns.
// Mailer.HandleBatch admits the tells of a run per recipient and sender,
// one mailbox reservation and at most one wake-up each, keeping every
// recipient's arrival order (FuzzHandleBatch holds it to the effect of
// Handle frame by frame).
//
// # The fake
//
// MemNetwork and Mem implement the same Transport in memory, with
// partitions, drops and delays, for testing the layers above. One contract
// suite runs against both.
//
// Usage:
//
//	t, err := wire.NewQUIC(wire.Config{
//		Name: "node-1", ListenAddr: ":7947",
//		Certificate: cert, CAs: pool,
//		Resolve: members.Address,
//		Handler: router.Deliver,
//		Events:  asks.OnLinkEvent,
//	})
//	…
//	err = t.Send("node-2", recipientHash, envelope)
package wire
