package tempest

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/internal/kinds"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/wire"
	"github.com/tempest-actors/tempest/wire/bare"
)

// Errors of kind registration and the JSON gateway.
var (
	// ErrInvalidKind wraps every problem Register reports.
	ErrInvalidKind = kinds.ErrInvalidKind
	// ErrNoGateway: the kind was registered without a JSON gateway schema.
	ErrNoGateway = errors.New("tempest: kind has no JSON gateway")
	// ErrBadJSON is matched by every *JSONError.
	ErrBadJSON = errors.New("tempest: JSON does not fit the kind's schema")
	// ErrUnregisteredMessage: a value's Go type is not among the message
	// types registered on this node, so it cannot be encoded (for the
	// wire or for a JSON reply). In a cluster every message to a virtual
	// actor must be of a registered type, also when its owner is this
	// node, so a send does not work or fail depending on where the key
	// lives. It is wire.ErrUnregistered.
	ErrUnregisteredMessage = wire.ErrUnregistered
	// ErrMessageTooLarge: a message or reply whose encoding exceeds the
	// transport's frame limit (ClusterConfig.Wire.MaxFrameSize, 4 MiB by
	// default) cannot cross to another node. A send to an actor owned
	// elsewhere fails with it at once, and so does an ask whose reply
	// cannot cross back (the asker is told at once, it does not wait for
	// its deadline). Mail whose sender and owner are on the same node is
	// not encoded and not limited, so keep messages well below the limit,
	// or raise it alike on every node. It is wire.ErrFrameTooLarge.
	ErrMessageTooLarge = wire.ErrFrameTooLarge
)

// KindOptions configure one kind of virtual actor on a node: the
// supervisor's options plus what the node needs to move the kind's
// messages across the network and to and from JSON.
type KindOptions struct {
	// KindOptions are the supervisor's options (mailbox depth, idle
	// timeout, turn budget, remedy, persistence, required clauses).
	prospero.KindOptions

	// Messages are the message types the kind receives and replies with.
	// A message sent to another node must be of a registered type; local
	// mail may be any Go value (in a cluster it must be registered too).
	// Several kinds may list the same message (the same tag, name and Go
	// type); otherwise tags and types are unique on the node, and a tag
	// must mean the same on every node of a cluster.
	//
	// A kind that lists messages receives only those: a message of a type
	// another kind registered is refused with ErrUnregisteredMessage
	// ("T is not a message of kind K"), by the sender's node when it
	// registers the kind, else by the owner's (an ask gets that error, a
	// tell is refused there and counted in Stats().Mail.Undeclared). A
	// kind that lists none takes any message.
	Messages []Message

	// Errors are the application sentinels the kind's actors reply with
	// (Context.ReplyError), by code: an error reply that matches one
	// (errors.Is) keeps that identity on an asker on another node, so
	// errors.Is(err, ErrInsufficientFunds) holds wherever the owner
	// lives. Every node must register the same code for the same
	// sentinel; several kinds may list the same pair. Codes starting with
	// "tempest." are reserved, and Tempest's own sentinels that cross
	// under codes of their own (actor.ErrRefused, ErrNotCommitted and the
	// other reply errors of package actor, those of package reminders,
	// context.Canceled and context.DeadlineExceeded) keep their identity
	// already, so a kind cannot list them (ErrInvalidKind).
	//
	// Errors with data (a struct type implementing error) need no entry
	// here: declare the type among Messages, and a reply error that is or
	// wraps a value of it crosses in its codec and in the form it was
	// sent (T or *T), so errors.As finds it on every node.
	//
	// Any other reply error crosses as its text and the actor sentinel
	// it matches (context.DeadlineExceeded and context.Canceled
	// included), a *wire.RemoteError; in a cluster an asker on the
	// owner's node gets that same form, so errors.Is and errors.As give
	// the same answer on every node, registered or not.
	Errors map[string]error

	// Gateway, when set, lets AskJSON and TellJSON address the kind.
	Gateway *Gateway

	// Reminders lets the kind's actors register and unregister durable
	// reminders in their turns (Node.Reminders, docs/reminders.md). A
	// turn that does is answered only once its reminder changes are
	// committed: its reply and the mail it sent are held until then, as
	// a kind persisted every turn holds them for its state, while the
	// worker goes on with other turns. If they are not committed the
	// turn's outputs fail with actor.ErrNotCommitted, but a state the
	// turn wrote (a kind persisted every turn) may be committed all the
	// same: the outcome of such a turn is unknown, as of any
	// ErrNotCommitted, so a turn a caller may retry should be idempotent.
	//
	// The cost is paid by every turn of the kind, also one that
	// registers nothing: its outputs go through the held path, so a
	// plain tell to a local actor no longer leaves during the turn, a
	// turn's reply and its sends to remote actors leave at the end of
	// the turn, and a remote refusal of a tell comes back as
	// actor.Undelivered rather than as Tell's error. A kind persisted
	// every turn or periodically holds its outputs already and may
	// register reminders without it.
	Reminders bool
}

// Gateway is a kind's JSON gateway: the BARE schema of its messages and the
// names of its input and reply types. The input and reply types must be
// among the kind's Messages (by Message.Name).
type Gateway struct {
	// Schema is BARE schema text declaring Input and Reply.
	Schema string
	// Input is the type name of the messages the gateway sends.
	Input string
	// Reply is the type name of the kind's replies to asks ("" when the
	// kind only takes tells).
	Reply string
}

// Message describes one message type of a kind: its wire tag, its BARE
// type name and its codec. Build one with MessageOf (a type generated by
// baregen) or CodecOf (a hand-written codec).
//
// A union is registered member by member (each member type with its own
// tag); the JSON gateway finds the member from the union's BARE tag and the
// member's Name.
//
// A message that arrives from another node, or from the JSON gateway, is
// delivered as a T value (not *T): actors should accept both forms when
// local senders use pointers.
type Message struct {
	// Tag identifies the type on the wire: non-zero, unique on the node,
	// and the same on every node of a cluster.
	Tag uint32
	// Name is the BARE type name of the schema (for the JSON gateway).
	Name string

	types     []reflect.Type // Go types encoded by this codec
	marshal   func(v any) ([]byte, error)
	unmarshal func(b []byte) (any, error)
	register  func(r *wire.Registry) error // adds the type to the wire registry
}

// bareType is what baregen generates for a type T: methods on *T.
type bareType[T any] interface {
	*T
	AppendBARE(dst []byte) ([]byte, error)
	DecodeBARE(d *bare.Decoder)
	UnmarshalBARE(b []byte) error
}

// MessageOf describes the generated type T (struct, enum or void). Values
// of T and *T encode the same; decoding yields a T value. name is its BARE
// type name.
func MessageOf[T any, PT bareType[T]](tag uint32, name string) Message {
	return Message{
		Tag:   tag,
		Name:  name,
		types: []reflect.Type{reflect.TypeFor[T](), reflect.TypeFor[*T]()},
		marshal: func(v any) ([]byte, error) {
			switch x := v.(type) {
			case T:
				return PT(&x).AppendBARE(nil)
			case *T:
				if x != nil {
					return PT(x).AppendBARE(nil)
				}
			}
			return nil, fmt.Errorf("%w: %T is not %s", ErrUnregisteredMessage, v, name)
		},
		unmarshal: func(b []byte) (any, error) {
			var v T
			if err := PT(&v).UnmarshalBARE(b); err != nil {
				return nil, err
			}
			return v, nil
		},
		register: func(r *wire.Registry) error { return wire.Register[T, PT](r, tag) },
	}
}

// schemaType is what baregen generates for a type T whose schema
// declaration carries a "# @tag N" annotation.
type schemaType[T any] interface {
	bareType[T]
	MessageTag() uint32
	BAREName() string
}

// SchemaMessage describes the generated type T with the tag and name its
// schema declares ("# @tag N" on the line before the type), so the tag is
// written once, in the schema, and not again in Go:
//
//	# @tag 1001
//	type EchoIn struct { text: str }
//
//	Messages: []tempest.Message{tempest.SchemaMessage[EchoIn]()}
//
// Every node's policy digest for a kind covers its message tags and
// names, so a node that declares a tag differently for the kind
// disagrees with the cluster and is given none of the kind's shards
// (see KindPolicy).
func SchemaMessage[T any, PT schemaType[T]]() Message {
	var v T
	return MessageOf[T, PT](PT(&v).MessageTag(), PT(&v).BAREName())
}

// CodecOf describes T with a hand-written codec: enc appends v's encoding
// to dst, dec decodes a whole body (without keeping it). Register refuses
// (ErrInvalidKind) a message without both functions or a name, or whose
// T is an interface type.
func CodecOf[T any](tag uint32, name string, enc func(dst []byte, v T) ([]byte, error), dec func(b []byte) (T, error)) Message {
	return Message{
		Tag:   tag,
		Name:  name,
		types: []reflect.Type{reflect.TypeFor[T]()},
		marshal: func(v any) ([]byte, error) {
			x, ok := v.(T)
			if !ok || enc == nil {
				return nil, fmt.Errorf("%w: %T is not %s", ErrUnregisteredMessage, v, name)
			}
			return enc(nil, x)
		},
		unmarshal: func(b []byte) (any, error) {
			if dec == nil {
				return nil, fmt.Errorf("%w: %s has no decoder", ErrUnregisteredMessage, name)
			}
			v, err := dec(b)
			if err != nil {
				return nil, err
			}
			return v, nil
		},
		register: func(r *wire.Registry) error {
			return wire.RegisterCodec(r, tag, enc, dec)
		},
	}
}

// JSONError reports JSON that does not fit a kind's gateway schema. Err is
// the transcoder's error, which names the offending field
// ("$.Add.n: ..."); errors.Is(err, ErrBadJSON) holds.
type JSONError struct {
	Kind string
	Type string
	Err  error
}

func (e *JSONError) Error() string {
	return fmt.Sprintf("tempest: JSON for %s (%s): %v", e.Kind, e.Type, e.Err)
}

// Unwrap returns the transcoder's error.
func (e *JSONError) Unwrap() error { return e.Err }

// Is reports ErrBadJSON.
func (e *JSONError) Is(target error) bool { return target == ErrBadJSON }

// kindInfo is a registered kind.
type kindInfo struct {
	name    string
	factory func(key string) actor.Actor
	opts    KindOptions
	gw      *kinds.Gateway // nil without a gateway
	tags    wire.KindTags  // the tags of opts.Messages; nil: none listed
}

// MaxMessageTag is the largest message tag; larger ones belong to the
// mail protocol.
const MaxMessageTag = kinds.MaxTag

// codec is m as the node's message table holds it.
func (m Message) codec() kinds.Codec {
	return kinds.Codec{Tag: m.Tag, Name: m.Name, Types: m.types, Marshal: m.marshal, Unmarshal: m.unmarshal, Register: m.register}
}

func codecs(msgs []Message) []kinds.Codec {
	out := make([]kinds.Codec, len(msgs))
	for i, m := range msgs {
		out[i] = m.codec()
	}
	return out
}
