package membership

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/memberlist"
)

// MetaLimit is the most bytes of encoded metadata gossip can carry.
const MetaLimit = memberlist.MetaMaxSize

// metaVersion is the encoding version this package writes. Later versions
// may only append fields, so a decoder reads the fields it knows from any
// version ≥ 1 and ignores the rest. Version 2 added DataID and the
// InCluster flag.
const metaVersion = 2

// Metadata errors.
var (
	// ErrMetaTooLarge is matched (errors.Is) by *MetaTooLargeError.
	ErrMetaTooLarge = errors.New("membership: node metadata too large")
	// ErrBadMeta reports metadata that cannot be decoded.
	ErrBadMeta = errors.New("membership: bad node metadata")
)

// MetaTooLargeError reports metadata whose encoding exceeds MetaLimit even
// after the kind list was replaced by its digest.
type MetaTooLargeError struct {
	Size  int // encoded size in bytes
	Limit int // MetaLimit
}

func (e *MetaTooLargeError) Error() string {
	return fmt.Sprintf("membership: node metadata is %d bytes, the gossip limit is %d (shorten addresses, digest or version)", e.Size, e.Limit)
}

// Unwrap makes errors.Is(err, ErrMetaTooLarge) true.
func (e *MetaTooLargeError) Unwrap() error { return ErrMetaTooLarge }

// Meta is what a node tells every other node about itself through gossip.
//
// Kinds is a hint for routing and placement; the authoritative list is the
// node's manifest (identified by ManifestDigest). When the sorted kind list
// does not fit the 512-byte gossip limit, it is replaced by KindsDigest and
// Kinds arrives empty: readers must then consult the manifest.
type Meta struct {
	Name           string   // node name; equals the member name
	QUICAddr       string   // host:port of the QUIC listener (mail, control, raft)
	HTTPAddr       string   // host:port of the HTTP listener (admin, gateway)
	ManifestDigest string   // opaque digest of the node's manifest
	Kinds          []string // registered actor kinds, sorted and unique
	KindsDigest    string   // set only when Kinds was too long to gossip
	Version        string   // build version
	// BootID is random per process start, so peers can tell a restarted
	// node (same name, maybe same address) from one that merely updated.
	BootID uint64
	// Leaving is set by Membership.Close just before the node departs, so
	// peers (placement) can drain it and report its departure as a leave
	// rather than a failure. UpdateMeta ignores it.
	Leaving bool
	// DataID identifies the node's data directory: random, written there
	// at its first start (placement.LoadDataID). The same name with
	// another DataID is a node that lost its data, which raft must not
	// take for the voter it was (placement.Peer.DataID). Empty from nodes
	// built before it existed.
	DataID string
	// InCluster is set once the node holds raft state (placement.Peer.InCluster):
	// no newcomer bootstraps a second cluster beside it.
	InCluster bool
}

// Truncated reports whether Kinds was replaced by KindsDigest.
func (m Meta) Truncated() bool { return m.KindsDigest != "" }

// clone returns a deep copy of m.
func (m Meta) clone() Meta {
	m.Kinds = slices.Clone(m.Kinds)
	return m
}

// normalize sorts and de-duplicates Kinds.
func (m Meta) normalize() Meta {
	m = m.clone()
	slices.Sort(m.Kinds)
	m.Kinds = slices.Compact(m.Kinds)
	if len(m.Kinds) == 0 {
		m.Kinds = nil
	}
	return m
}

// KindsDigest returns the digest that replaces a kind list too long to
// gossip: hex of the first 16 bytes of SHA-256 over the sorted, unique kinds
// joined by newlines.
func KindsDigest(kinds []string) string {
	k := Meta{Kinds: kinds}.normalize().Kinds
	sum := sha256.Sum256([]byte(strings.Join(k, "\n")))
	return hex.EncodeToString(sum[:16])
}

// Encoding (version 2), all strings as uvarint length + bytes:
//
//	version byte
//	name, quic, http, manifest digest, build version
//	boot id (uvarint)
//	flags byte (bit 0: kinds truncated, bit 1: leaving, bit 2: in cluster)
//	truncated: kinds digest   otherwise: uvarint count, then each kind
//	data id (version 2)
//
// A version 1 decoder ignores bit 2 and the data id.

const (
	flagKindsTruncated = 1 << 0
	flagLeaving        = 1 << 1
	flagInCluster      = 1 << 2
)

// encode returns the gossip form of m, replacing Kinds by KindsDigest when
// the full form exceeds MetaLimit. It fails with *MetaTooLargeError if
// even that does not fit.
func (m Meta) encode() ([]byte, error) {
	m = m.normalize()
	m.KindsDigest = ""
	b := m.appendTo(nil, false)
	if len(b) <= MetaLimit {
		return b, nil
	}
	m.KindsDigest = KindsDigest(m.Kinds)
	b = m.appendTo(nil, true)
	if len(b) > MetaLimit {
		return nil, &MetaTooLargeError{Size: len(b), Limit: MetaLimit}
	}
	return b, nil
}

func (m Meta) appendTo(b []byte, truncated bool) []byte {
	str := func(b []byte, s string) []byte {
		b = binary.AppendUvarint(b, uint64(len(s)))
		return append(b, s...)
	}
	b = append(b, metaVersion)
	b = str(b, m.Name)
	b = str(b, m.QUICAddr)
	b = str(b, m.HTTPAddr)
	b = str(b, m.ManifestDigest)
	b = str(b, m.Version)
	b = binary.AppendUvarint(b, m.BootID)
	var flags byte
	if m.Leaving {
		flags |= flagLeaving
	}
	if m.InCluster {
		flags |= flagInCluster
	}
	if truncated {
		b = append(b, flags|flagKindsTruncated)
		b = str(b, m.KindsDigest)
	} else {
		b = append(b, flags)
		b = binary.AppendUvarint(b, uint64(len(m.Kinds)))
		for _, k := range m.Kinds {
			b = str(b, k)
		}
	}
	return str(b, m.DataID)
}

// decodeMeta parses the gossip form of metadata. Unknown trailing fields of
// later versions are ignored.
func decodeMeta(b []byte) (Meta, error) {
	d := decoder{b: b}
	var m Meta
	v := d.byte()
	if d.err == nil && v < 1 {
		return Meta{}, fmt.Errorf("%w: version %d", ErrBadMeta, v)
	}
	m.Name = d.str()
	m.QUICAddr = d.str()
	m.HTTPAddr = d.str()
	m.ManifestDigest = d.str()
	m.Version = d.str()
	m.BootID = d.uvarint()
	flags := d.byte()
	m.Leaving = flags&flagLeaving != 0
	m.InCluster = flags&flagInCluster != 0
	if flags&flagKindsTruncated != 0 {
		m.KindsDigest = d.str()
	} else {
		n := d.uvarint()
		if n > uint64(len(d.b)) { // each kind takes at least one byte
			return Meta{}, fmt.Errorf("%w: %d kinds in %d bytes", ErrBadMeta, n, len(d.b))
		}
		for range n {
			m.Kinds = append(m.Kinds, d.str())
		}
	}
	if v >= 2 {
		m.DataID = d.str()
	}
	if d.err != nil {
		return Meta{}, d.err
	}
	return m, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated %s", ErrBadMeta, what)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) < 1 {
		d.fail("byte")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail("string")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
