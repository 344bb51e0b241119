package wire

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"
)

// Defaults for Config.
const (
	DefaultMailLanes        = 4
	DefaultMaxFrameSize     = 4 << 20
	DefaultLaneQueueBytes   = 1 << 20
	DefaultWriteBufferSize  = 64 << 10
	DefaultKeepAlivePeriod  = 2 * time.Second
	DefaultIdleTimeout      = 10 * time.Second
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultBackoffMin       = 100 * time.Millisecond
	DefaultBackoffMax       = 10 * time.Second
	DefaultMaxStreams       = 256
	ProtocolVersion         = 2
)

// Config configures a QUIC transport. Zero fields take the defaults.
type Config struct {
	// Name is this node's name; Certificate must name it (first DNS SAN).
	Name string
	// ListenAddr is the UDP address to bind, e.g. ":7947" or
	// "127.0.0.1:0". Ignored when PacketConn is set.
	ListenAddr string
	// PacketConn, if set, is used instead of binding ListenAddr; the
	// transport does not close it.
	PacketConn net.PacketConn
	// Certificate is this node's certificate chain and key, issued by the
	// cluster CA.
	Certificate tls.Certificate
	// CAs are the cluster CA certificates peers must chain to.
	CAs *x509.CertPool
	// Resolve maps a peer node name to its "host:port" QUIC address
	// (membership supplies it). Required.
	Resolve func(ctx context.Context, peer string) (string, error)
	// Admit, if set, decides whether a peer that proved its name with a
	// certificate may link: a nil error admits it, any other refuses the
	// Hello with NOT_MEMBER (the dialer's Connect fails with ErrNotMember,
	// the refusal counts as HelloRejected). It is asked once per inbound
	// connection, after the certificate and the protocol version check;
	// nil admits every certified peer. A cluster node admits its members
	// only, so a certificate of the cluster CA for a name that is no
	// member carries no mail.
	Admit func(peer string) error
	// Handler receives inbound frames. Required.
	Handler Handler
	// HandleBatch, if set, receives inbound frames instead of Handler,
	// a run of frames that arrived together per call (see BatchHandler);
	// Mailer.HandleBatch is one.
	HandleBatch BatchHandler
	// Events, if set, is called on link up/down from transport
	// goroutines, never concurrently with itself for one peer; it must
	// not block.
	Events func(LinkEvent)
	// ManifestDigest is sent in the Hello (opaque to the transport).
	ManifestDigest []byte
	// MailLanes is K, the number of mail lanes per link (default 4).
	MailLanes int
	// MaxFrameSize bounds one frame, sent or received (default 4 MiB).
	MaxFrameSize int
	// LaneQueueBytes bounds the bytes queued per lane and link waiting
	// for the network; beyond it Send returns ErrQueueFull (default 1 MiB).
	// A frame larger than the bound is still accepted into an empty queue.
	LaneQueueBytes int
	// WriteBufferSize is the coalescing target of one stream write
	// (default 64 KiB); a writer hands at most about this much to QUIC at
	// once, so a large backlog is written in a few large writes.
	WriteBufferSize int
	// KeepAlivePeriod, IdleTimeout and HandshakeTimeout tune QUIC.
	KeepAlivePeriod  time.Duration
	IdleTimeout      time.Duration
	HandshakeTimeout time.Duration
	// BackoffMin and BackoffMax bound the delay after a failed dial
	// during which sends to that peer fail fast with ErrUnavailable; it
	// doubles per consecutive failure.
	BackoffMin, BackoffMax time.Duration
	// MaxStreams bounds the concurrent service (raft) streams a peer may
	// open on one link (default 256).
	MaxStreams int
	// StatelessResetKey, if nil, is derived from the certificate's key
	// so it stays stable across restarts.
	StatelessResetKey *[32]byte
	// Clock defaults to the wall clock; it drives back-off and the
	// certificate validity check.
	Clock Clock
	// Logger defaults to discarding.
	Logger *slog.Logger
	// RejectLogInterval bounds the warnings about refused inbound
	// connections (certificates that do not verify, bad Hellos) and
	// inbound lanes reset for a bad frame: at most one per cause and
	// interval, with the count since the previous one; Stats counts
	// every one. Zero means one minute.
	RejectLogInterval time.Duration
}

// DefaultConfig returns a Config with every default filled in; callers
// still set Name, Certificate, CAs, Resolve and Handler.
func DefaultConfig() Config {
	return Config{
		ListenAddr:       ":7947",
		MailLanes:        DefaultMailLanes,
		MaxFrameSize:     DefaultMaxFrameSize,
		LaneQueueBytes:   DefaultLaneQueueBytes,
		WriteBufferSize:  DefaultWriteBufferSize,
		KeepAlivePeriod:  DefaultKeepAlivePeriod,
		IdleTimeout:      DefaultIdleTimeout,
		HandshakeTimeout: DefaultHandshakeTimeout,
		BackoffMin:       DefaultBackoffMin,
		BackoffMax:       DefaultBackoffMax,
		MaxStreams:       DefaultMaxStreams,
		Clock:            RealClock(),
	}
}

// withDefaults returns c with zero fields replaced by defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.ListenAddr == "" {
		c.ListenAddr = d.ListenAddr
	}
	if c.MailLanes == 0 {
		c.MailLanes = d.MailLanes
	}
	if c.MaxFrameSize == 0 {
		c.MaxFrameSize = d.MaxFrameSize
	}
	if c.LaneQueueBytes == 0 {
		c.LaneQueueBytes = d.LaneQueueBytes
	}
	if c.WriteBufferSize == 0 {
		c.WriteBufferSize = d.WriteBufferSize
	}
	if c.KeepAlivePeriod == 0 {
		c.KeepAlivePeriod = d.KeepAlivePeriod
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = d.IdleTimeout
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = d.HandshakeTimeout
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = d.BackoffMin
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = d.BackoffMax
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = d.MaxStreams
	}
	if c.Clock == nil {
		c.Clock = d.Clock
	}
	if c.RejectLogInterval == 0 {
		c.RejectLogInterval = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports the first problem with c (after defaults apply).
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := ValidateNodeName(c.Name); err != nil {
		return err
	}
	if len(c.Certificate.Certificate) == 0 || c.Certificate.PrivateKey == nil {
		return errors.New("wire: Config.Certificate is required")
	}
	if c.CAs == nil {
		return errors.New("wire: Config.CAs is required")
	}
	if c.Resolve == nil {
		return errors.New("wire: Config.Resolve is required")
	}
	if c.Handler == nil {
		return errors.New("wire: Config.Handler is required")
	}
	if c.MailLanes < 1 || c.MailLanes > MaxMailLanes {
		return fmt.Errorf("wire: MailLanes %d out of 1..%d", c.MailLanes, MaxMailLanes)
	}
	if c.MaxFrameSize < 16 {
		return fmt.Errorf("wire: MaxFrameSize %d too small", c.MaxFrameSize)
	}
	if c.LaneQueueBytes < 1024 {
		return errors.New("wire: LaneQueueBytes below 1 KiB")
	}
	if c.BackoffMin < 0 || c.BackoffMax < c.BackoffMin {
		return errors.New("wire: need 0 <= BackoffMin <= BackoffMax")
	}
	if c.WriteBufferSize < 1024 {
		return errors.New("wire: WriteBufferSize below 1 KiB")
	}
	if c.MaxStreams < 1 {
		return errors.New("wire: MaxStreams must be positive")
	}
	leaf, err := x509.ParseCertificate(c.Certificate.Certificate[0])
	if err != nil {
		return fmt.Errorf("wire: Config.Certificate: %w", err)
	}
	if !certHasName(leaf, c.Name) {
		return fmt.Errorf("wire: certificate names %q, node is %q", certName(leaf), c.Name)
	}
	return nil
}
