package kinds

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"

	"github.com/tempest-actors/tempest/reminders"
	"github.com/tempest-actors/tempest/wire"
)

// ErrInvalidKind wraps every problem a kind's registration reports.
var ErrInvalidKind = errors.New("tempest: invalid kind")

// MaxTag is the largest message tag; larger ones belong to the mail
// protocol.
const MaxTag uint32 = 0xFFFF_FF00

// Codec is one message type of a kind: its wire tag, its BARE type name,
// the Go types it encodes and its codec. Marshal is nil for a value that
// was not built by the root package's constructors.
type Codec struct {
	Tag       uint32
	Name      string
	Types     []reflect.Type
	Marshal   func(v any) ([]byte, error)
	Unmarshal func(b []byte) (any, error)
	Register  func(r *wire.Registry) error // adds the type to a wire registry
}

// Registered is a message in the table, with the first kind that
// registered it.
type Registered struct {
	Kind string
	Codec
}

// Messages maps Go types, tags and names to codecs. Written only before
// Start, read-only afterwards.
type Messages struct {
	byType map[reflect.Type]*Registered
	byTag  map[uint32]*Registered
	byName map[string]*Registered // kind + "\x00" + Name
	// declared holds, per kind, the tags it lists (several kinds may list
	// one message; Registered.Kind names only the first).
	declared map[string]map[uint32]bool
}

// NewMessages returns an empty table.
func NewMessages() *Messages {
	return &Messages{
		byType:   map[reflect.Type]*Registered{},
		byTag:    map[uint32]*Registered{},
		byName:   map[string]*Registered{},
		declared: map[string]map[uint32]bool{},
	}
}

// Len is the number of tags registered.
func (t *Messages) Len() int { return len(t.byTag) }

// ByType returns the message of Go type ty (nil if none).
func (t *Messages) ByType(ty reflect.Type) *Registered { return t.byType[ty] }

// ByName returns the message kind declares under the BARE name (nil if
// none).
func (t *Messages) ByName(kind, name string) *Registered { return t.byName[kind+"\x00"+name] }

// Check reports why msgs cannot be added for kind, without adding them.
func (t *Messages) Check(kind string, msgs []Codec) error {
	tags := map[uint32]bool{}
	types := map[reflect.Type]bool{}
	scratch := wire.NewRegistry() // what Start will register, tried now
	for _, m := range msgs {
		switch {
		case m.Tag == 0 || m.Tag > MaxTag:
			return fmt.Errorf("%w %q: message %q: tag %d out of range [1,%d]", ErrInvalidKind, kind, m.Name, m.Tag, MaxTag)
		case m.Marshal == nil || m.Register == nil:
			return fmt.Errorf("%w %q: message %q: build it with MessageOf or CodecOf", ErrInvalidKind, kind, m.Name)
		case m.Name == "":
			return fmt.Errorf("%w %q: message tag %d has no name", ErrInvalidKind, kind, m.Tag)
		case tags[m.Tag]:
			return fmt.Errorf("%w %q: message tag %d is used twice", ErrInvalidKind, kind, m.Tag)
		}
		if err := m.Register(scratch); err != nil {
			return fmt.Errorf("%w %q: message %q: %w", ErrInvalidKind, kind, m.Name, err)
		}
		tags[m.Tag] = true
		if old := t.byTag[m.Tag]; old != nil {
			// Another kind registered the tag: fine if it is the same
			// message (a Go type several kinds take), else a conflict.
			if old.Name != m.Name || !slices.Equal(old.Types, m.Types) {
				return fmt.Errorf("%w %q: message tag %d is %s (%v) in kind %q", ErrInvalidKind, kind, m.Tag, old.Name, old.Types[0], old.Kind)
			}
		}
		for _, ty := range m.Types {
			if types[ty] {
				return fmt.Errorf("%w %q: Go type %v is listed twice", ErrInvalidKind, kind, ty)
			}
			if old := t.byType[ty]; old != nil && old.Tag != m.Tag {
				return fmt.Errorf("%w %q: Go type %v has tag %d in kind %q, not %d", ErrInvalidKind, kind, ty, old.Tag, old.Kind, m.Tag)
			}
			types[ty] = true
		}
	}
	return nil
}

// Add adds msgs for kind (after Check).
func (t *Messages) Add(kind string, msgs []Codec) {
	if t.declared[kind] == nil {
		t.declared[kind] = map[uint32]bool{}
	}
	for _, m := range msgs {
		t.declared[kind][m.Tag] = true
		r := t.byTag[m.Tag]
		if r == nil { // the first kind to register the message keeps it
			r = &Registered{Kind: kind, Codec: m}
			t.byTag[m.Tag] = r
			for _, ty := range m.Types {
				t.byType[ty] = r
			}
		}
		if m.Name != "" {
			t.byName[kind+"\x00"+m.Name] = r
		}
	}
}

// Register gives r the codec of every message, once each, in the order
// of kinds (the node's kind names, sorted), each kind's messages in the
// order it declared them.
func (t *Messages) Register(r *wire.Registry, kinds []string, declared func(kind string) []Codec) error {
	for _, name := range kinds {
		for _, m := range declared(name) {
			if t.byTag[m.Tag].Kind != name {
				continue // a message several kinds take is registered once
			}
			if err := m.Register(r); err != nil {
				return fmt.Errorf("tempest: kind %q: %w", name, err)
			}
		}
	}
	return nil
}

// Encode stores a reminder's payload p as one of kind's messages: the
// tag, as the name, and the message's encoding.
func (t *Messages) Encode(kind string, p any) (string, []byte, error) {
	m := t.byType[reflect.TypeOf(p)]
	if m == nil || !t.declared[kind][m.Tag] {
		return "", nil, fmt.Errorf("%w: %T is not a message of kind %q (declare it in KindOptions.Messages)",
			reminders.ErrUnknownPayload, p, kind)
	}
	b, err := m.Marshal(p)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", reminders.ErrUnknownPayload, err)
	}
	return strconv.FormatUint(uint64(m.Tag), 10), b, nil
}

// Decode is the inverse of Encode.
func (t *Messages) Decode(kind, name string, b []byte) (any, error) {
	tag, err := strconv.ParseUint(name, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("%w: stored as %q", reminders.ErrUnknownPayload, name)
	}
	m := t.byTag[uint32(tag)]
	if m == nil || !t.declared[kind][m.Tag] {
		return nil, fmt.Errorf("%w: tag %d is not a message of kind %q", reminders.ErrUnknownPayload, tag, kind)
	}
	return m.Unmarshal(b)
}
