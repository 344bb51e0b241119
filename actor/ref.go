package actor

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits of a virtual actor's name. Kinds and keys travel in every
// envelope, name records in the state store (bbolt refuses keys over 32
// KiB; its key is the kind, a separator and the key) and in the shard
// index, and appear in URLs of the HTTP API; these bounds keep all of them
// far from their own limits.
const (
	// MaxKindLen is the longest kind name, in bytes.
	MaxKindLen = 255
	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = 4096
)

// CheckVirtual reports whether kind/key can name a virtual actor: both
// non-empty valid UTF-8, kind at most MaxKindLen bytes without '/' or '#'
// and not starting with '@' (which would make the text form of a
// reference ambiguous), key at most MaxKeyLen bytes. Its errors match
// ErrInvalidKey. Every entry point of Tempest checks this before anything
// is sent, so an identity that fails it is refused alike on every node.
func CheckVirtual(kind, key string) error {
	var why string
	switch {
	case kind == "":
		why = "empty kind"
	case len(kind) > MaxKindLen:
		why = fmt.Sprintf("kind of %d bytes, over %d", len(kind), MaxKindLen)
	case !utf8.ValidString(kind):
		why = "kind is not valid UTF-8"
	case strings.ContainsAny(kind, "/#") || kind[0] == '@':
		why = "kind contains '/' or '#' or starts with '@'"
	case key == "":
		why = "empty key"
	case len(key) > MaxKeyLen:
		why = fmt.Sprintf("key of %d bytes, over %d", len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		why = "key is not valid UTF-8"
	default:
		return nil
	}
	return &InvalidKeyError{Kind: truncate(kind), Key: truncate(key), Reason: why}
}

// CheckKind reports whether kind can name a kind of virtual actor, as
// CheckVirtual does with a valid key (an *InvalidKeyError naming the kind
// only, matching ErrInvalidKey).
func CheckKind(kind string) error {
	err := CheckVirtual(kind, "-")
	if e, ok := err.(*InvalidKeyError); ok {
		e.Key = ""
	}
	return err
}

// Check reports whether r can address an actor. A virtual reference is
// checked with CheckVirtual; one built by Virtual with an empty key (it
// has no actor id either) fails with ErrInvalidKey; a spawned reference
// and the zero Ref pass (they resolve, or fail, where they are sent).
func (r Ref) Check() error {
	switch {
	case r.key != "":
		return CheckVirtual(r.scope, r.key)
	case r.id == 0 && r.scope != "":
		return CheckVirtual(r.scope, "")
	}
	return nil
}

// InvalidKeyError is the error of CheckVirtual: which identity was
// refused and why. It matches ErrInvalidKey.
type InvalidKeyError struct {
	// Kind and Key are the refused names, shortened to at most 64 bytes
	// each so that an oversized name does not flood logs and replies.
	Kind, Key string
	Reason    string
}

func (e *InvalidKeyError) Error() string {
	if e.Key == "" && e.Reason != "empty key" {
		return fmt.Sprintf("tempest: invalid kind %q: %s", e.Kind, e.Reason)
	}
	return fmt.Sprintf("tempest: invalid key %q/%q: %s", e.Kind, e.Key, e.Reason)
}

// Is makes the error match ErrInvalidKey.
func (e *InvalidKeyError) Is(target error) bool { return target == ErrInvalidKey }

// truncate shortens s for an error message.
func truncate(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// Ref names an actor. It is a small comparable value: copy it freely, use it
// as a map key, print it.
//
// A Ref names either a virtual actor, addressed by kind and key ("user/42")
// and placed by the cluster, or a child spawned on a node, addressed by the
// node name and a node-local id. Either may carry an incarnation number: a
// Ref with a non-zero incarnation is pinned to that incarnation, and reads
// ActorTerminated once the actor was restarted (re-minted); incarnation zero
// means "whatever incarnation is current".
//
// The zero Ref names nobody (for example the Sender of mail sent from
// program code).
type Ref struct {
	// scope is the kind of a virtual actor (key != "") or the node of a
	// spawned one. Four fields keep Ref small and let the compiler keep it
	// in registers on the per-message path.
	scope string
	key   string
	id    uint64
	inc   uint64
}

// Virtual returns the reference of the virtual actor kind/key. The parts
// must pass CheckVirtual; sending to a reference that does not fails with
// ErrInvalidKey (an empty key makes it a malformed reference that names no
// actor).
func Virtual(kind, key string) Ref { return Ref{scope: kind, key: key} }

// Spawned returns the reference of the child actor with the node-local id on
// node, at incarnation inc. Schedulers mint these; users get them from Spawn.
func Spawned(node string, id, inc uint64) Ref { return Ref{scope: node, id: id, inc: inc} }

// IsZero reports whether r names nobody.
func (r Ref) IsZero() bool { return r == Ref{} }

// IsVirtual reports whether r names a virtual actor (kind/key).
func (r Ref) IsVirtual() bool { return r.key != "" }

// Kind is the kind of a virtual actor, "" for a spawned one.
func (r Ref) Kind() string {
	if r.key == "" {
		return ""
	}
	return r.scope
}

// Key is the key of a virtual actor, "" for a spawned one.
func (r Ref) Key() string { return r.key }

// Node is the node a spawned actor lives on, "" for a virtual one.
func (r Ref) Node() string {
	if r.key != "" {
		return ""
	}
	return r.scope
}

// ID is the node-local id of a spawned actor, 0 for a virtual one.
func (r Ref) ID() uint64 { return r.id }

// Parts returns what a router needs from r without copying it (value
// methods on a Ref copy all of it): the kind of a virtual actor or the node
// of a spawned one, the key ("" for a spawned actor), the id and the
// incarnation.
func (r *Ref) Parts() (scope, key string, id, inc uint64) { return r.scope, r.key, r.id, r.inc }

// Incarnation is the incarnation r is pinned to, 0 when unpinned.
func (r Ref) Incarnation() uint64 { return r.inc }

// WithIncarnation returns r pinned to incarnation inc (0 unpins it).
func (r Ref) WithIncarnation(inc uint64) Ref { r.inc = inc; return r }

// Unpinned returns r without its incarnation: the identity itself.
func (r Ref) Unpinned() Ref { r.inc = 0; return r }

// String renders r as "kind/key" for a virtual actor and "@node/id" for a
// spawned one, followed by "#inc" when pinned. ParseRef reads it back.
func (r Ref) String() string {
	var s string
	switch {
	case r.IsZero():
		return "<nobody>"
	case r.key != "":
		s = r.scope + "/" + r.key
	default:
		s = "@" + r.scope + "/" + strconv.FormatUint(r.id, 10)
	}
	if r.inc != 0 {
		s += "#" + strconv.FormatUint(r.inc, 10)
	}
	return s
}

// ParseRef parses the String form of a Ref.
func ParseRef(s string) (Ref, error) {
	var r Ref
	body := s
	if i := strings.LastIndexByte(s, '#'); i >= 0 {
		inc, err := strconv.ParseUint(s[i+1:], 10, 64)
		if err != nil {
			return Ref{}, fmt.Errorf("tempest: bad incarnation in reference %q", s)
		}
		r.inc, body = inc, s[:i]
	}
	if strings.HasPrefix(body, "@") {
		i := strings.LastIndexByte(body, '/')
		if i < 1 {
			return Ref{}, fmt.Errorf("tempest: bad reference %q", s)
		}
		id, err := strconv.ParseUint(body[i+1:], 10, 64)
		if err != nil || id == 0 {
			return Ref{}, fmt.Errorf("tempest: bad actor id in reference %q", s)
		}
		r.scope, r.id = body[1:i], id
		return r, nil
	}
	kind, key, ok := strings.Cut(body, "/")
	if !ok || kind == "" || key == "" {
		return Ref{}, fmt.Errorf("tempest: reference %q is not kind/key", s)
	}
	r.scope, r.key = kind, key
	return r, nil
}

// ReferenceState is what a reference currently resolves to.
type ReferenceState uint8

const (
	// Unknown: nothing is known about the identity.
	Unknown ReferenceState = iota
	// Valid: the identity is current and active.
	Valid
	// Dormant: the identity is current, its state is at rest; mail hydrates it.
	Dormant
	// ActorTerminated: the identity (or the pinned incarnation) is gone.
	ActorTerminated
	// ProcessUnavailable: its node is gone or unreachable and it is not
	// placed elsewhere yet.
	ProcessUnavailable
)

func (s ReferenceState) String() string {
	switch s {
	case Valid:
		return "Valid"
	case Dormant:
		return "Dormant"
	case ActorTerminated:
		return "ActorTerminated"
	case ProcessUnavailable:
		return "ProcessUnavailable"
	default:
		return "Unknown"
	}
}
