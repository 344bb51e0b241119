package kinds

import (
	"fmt"
	"reflect"

	"github.com/tempest-actors/tempest/wire"
	"github.com/tempest-actors/tempest/wire/bare"
)

// Gateway converts between a kind's JSON and its Go messages, through
// the BARE form its schema declares.
type Gateway struct {
	// Input is the schema type of the messages the gateway sends, Reply
	// that of the kind's replies ("" when it only takes tells).
	Input, Reply string

	kind  string
	tc    *bare.Transcoder
	in    shape
	reply shape
	msgs  *Messages
}

// shape is the Input or Reply type of a gateway: one message type, or a
// union whose members are message types.
type shape struct {
	name    string
	members map[uint64]string // union tag → member type name; nil for a plain type
	tags    map[string]uint64 // member type name → union tag
}

// NewGateway validates a kind's gateway (schema text, input and reply
// type names) against the messages it declares; msgs is the table those
// are looked up in once the kind is added.
func NewGateway(kind, schema, input, reply string, declared []Codec, msgs *Messages) (*Gateway, error) {
	s, err := bare.ParseSchema(kind+".bare", []byte(schema))
	if err != nil {
		return nil, fmt.Errorf("%w %q: gateway schema: %w", ErrInvalidKind, kind, err)
	}
	names := map[string]bool{}
	for _, m := range declared {
		names[m.Name] = true
	}
	shapeOf := func(name string) (shape, error) {
		gt := shape{name: name}
		td, ok := s.Lookup(name)
		if !ok {
			return gt, fmt.Errorf("%w %q: gateway type %q is not in its schema", ErrInvalidKind, kind, name)
		}
		if u := bare.Resolve(td.Type); u.Kind == bare.KindUnion && !names[name] {
			gt.members, gt.tags = map[uint64]string{}, map[string]uint64{}
			for _, m := range u.Members {
				if m.Type.Kind != bare.KindNamed || !names[m.Type.Name] {
					return gt, fmt.Errorf("%w %q: member %d of union %q is not among its Messages", ErrInvalidKind, kind, m.Tag, name)
				}
				gt.members[m.Tag], gt.tags[m.Type.Name] = m.Type.Name, m.Tag
			}
			return gt, nil
		}
		if !names[name] {
			return gt, fmt.Errorf("%w %q: gateway type %q is not among its Messages", ErrInvalidKind, kind, name)
		}
		return gt, nil
	}
	if input == "" {
		return nil, fmt.Errorf("%w %q: gateway without an Input type", ErrInvalidKind, kind)
	}
	gw := &Gateway{Input: input, Reply: reply, kind: kind, tc: bare.NewTranscoder(s, bare.Config{}), msgs: msgs}
	if gw.in, err = shapeOf(input); err != nil {
		return nil, err
	}
	if reply != "" {
		if gw.reply, err = shapeOf(reply); err != nil {
			return nil, err
		}
	}
	return gw, nil
}

// FromJSON turns JSON of the Input type into the Go message.
func (gw *Gateway) FromJSON(js []byte) (any, error) {
	b, err := gw.tc.JSONToBARE(gw.Input, js)
	if err != nil {
		return nil, err
	}
	name := gw.in.name
	if gw.in.members != nil {
		d := bare.NewDecoder(b, bare.Config{})
		tag := d.Uint()
		if err := d.Err(); err != nil {
			return nil, err
		}
		name = gw.in.members[tag]
		b = b[d.Offset():]
	}
	r := gw.msgs.ByName(gw.kind, name)
	if r == nil {
		return nil, fmt.Errorf("%w: %s", wire.ErrUnregistered, name)
	}
	return r.Unmarshal(b)
}

// EncodeReply returns the BARE form of the reply v as the Reply type.
func (gw *Gateway) EncodeReply(v any) ([]byte, error) {
	t, r := gw.reply, gw.msgs.ByType(reflect.TypeOf(v))
	if r == nil {
		return nil, fmt.Errorf("%w: %T", wire.ErrUnregistered, v)
	}
	var prefix []byte
	if t.members != nil {
		tag, ok := t.tags[r.Name]
		if !ok {
			return nil, fmt.Errorf("%w: %T is not a member of %s", wire.ErrUnregistered, v, t.name)
		}
		prefix = bare.AppendUint(nil, tag)
	} else if r.Name != t.name {
		return nil, fmt.Errorf("%w: %T is not %s", wire.ErrUnregistered, v, t.name)
	}
	b, err := r.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(prefix, b...), nil
}

// ReplyJSON turns the BARE form of a reply into JSON.
func (gw *Gateway) ReplyJSON(b []byte) ([]byte, error) { return gw.tc.BAREToJSON(gw.Reply, b) }
