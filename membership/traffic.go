package membership

import (
	"bytes"
	"log/slog"
	"time"

	"github.com/tempest-actors/tempest/internal/ratelog"
)

// Causes of gossip traffic this node drops (the cause attribute of the
// summary lines, and the labels of the counters).
const (
	// CauseUndecryptable: a packet or stream that none of the installed
	// keys decrypts: a peer with another key, or none.
	CauseUndecryptable = "gossip_undecryptable"
	// CauseMalformed: traffic that decrypts (or needs no key) but does
	// not decode, or that memberlist refuses once decoded: bad or
	// truncated label header, bad checksum, unknown message type or
	// label, truncated, incompatible protocol versions, a ping for
	// another node.
	CauseMalformed = "gossip_malformed"
)

// DefaultDropLogInterval is how often, at most, a line is logged per
// cause of dropped gossip traffic.
const DefaultDropLogInterval = time.Minute

// TrafficStats counts gossip traffic this node dropped, by cause.
type TrafficStats struct {
	Undecryptable uint64
	Malformed     uint64
}

// Dropped returns the counts of gossip traffic this node dropped since
// it started.
func (m *Membership) Dropped() TrafficStats {
	return TrafficStats{Undecryptable: m.drops.Count(CauseUndecryptable), Malformed: m.drops.Count(CauseMalformed)}
}

// dropCause classifies a memberlist log line about traffic it dropped.
// memberlist neither counts these nor reports them other than as one log
// line per packet or connection, so its lines are the only place to see
// them; a line that matches nothing here is logged as it is. Every line
// memberlist (v0.7.0: net.go, label.go, security.go, state.go) writes
// about a packet or stream it received and dropped matches one pattern
// (TestDropCauseCoversMemberlistLines lists them); lines about this
// node's own sends, its overload and its shutdown do not.
func dropCause(msg []byte) (string, bool) {
	switch {
	case bytes.Contains(msg, []byte("Decrypt packet failed")),
		bytes.Contains(msg, []byte("could decrypt")),
		bytes.Contains(msg, []byte("encryption is configured but remote state is not encrypted")),
		bytes.Contains(msg, []byte("remote state is encrypted and encryption is not configured")),
		bytes.Contains(msg, []byte("payload is too small to decrypt")),
		bytes.Contains(msg, []byte("unsupported encryption version")):
		return CauseUndecryptable, true
	case bytes.HasPrefix(msg, []byte("Got invalid checksum")),
		bytes.HasPrefix(msg, []byte("missing message type byte")),
		bytes.HasPrefix(msg, []byte("UDP packet too short")),
		bytes.HasPrefix(msg, []byte("Failed to decode")),
		bytes.HasPrefix(msg, []byte("Failed to decompress")),
		bytes.HasPrefix(msg, []byte("msg type")),
		bytes.HasPrefix(msg, []byte("Message type")),
		bytes.HasPrefix(msg, []byte("Received invalid msgType")),
		bytes.HasPrefix(msg, []byte("Compound request had")),
		bytes.Contains(msg, []byte("unacceptable label")),
		bytes.Contains(msg, []byte("label header")),
		bytes.HasPrefix(msg, []byte("cannot decode label")),
		bytes.HasPrefix(msg, []byte("failed to receive")),
		bytes.HasPrefix(msg, []byte("Failed to receive user message")),
		bytes.HasPrefix(msg, []byte("Failed to read remote state")),
		bytes.HasPrefix(msg, []byte("Failed push/pull merge")),
		bytes.HasPrefix(msg, []byte("Got ping for unexpected node")),
		bytes.HasPrefix(msg, []byte("Ignoring an alive message")),
		bytes.HasPrefix(msg, []byte("ignoring alive message")),
		bytes.HasPrefix(msg, []byte("Rejected node")),
		bytes.HasPrefix(msg, []byte("Rejected IP update")):
		return CauseMalformed, true
	}
	return "", false
}

func newDropLimiter(log *slog.Logger, every time.Duration, now func() time.Time) *ratelog.Limiter {
	return ratelog.New(log, slog.LevelWarn, "gossip traffic dropped", every, now)
}
