package tempest

import (
	"context"
	"fmt"

	"github.com/tempest-actors/tempest/actor"
)

// AskJSON asks kind/key a message given as JSON and returns the reply as
// JSON, both in the form of the kind's gateway schema (see
// bare.Transcoder): JSON → BARE (the schema's Input type) → the registered
// Go type → Ask → the reply's BARE form → JSON (the Reply type).
//
// Errors: ErrInvalidKey, actor.ErrUnknownKind, ErrNoGateway, a *JSONError (ErrBadJSON)
// naming the field that does not fit, the Ask's errors, and
// ErrUnregisteredMessage when the actor replied with a value that is not
// of the Reply type.
func (n *Node) AskJSON(ctx context.Context, kind, key string, js []byte) ([]byte, error) {
	if err := n.usable(ctx); err != nil {
		return nil, err
	}
	k, msg, err := n.fromJSON(kind, key, js)
	if err != nil {
		return nil, err
	}
	reply, err := n.Ask(ctx, actor.Virtual(kind, key), msg)
	if err != nil {
		return nil, err
	}
	gw := k.gw
	if gw.Reply == "" {
		return []byte("null"), nil
	}
	b, err := gw.EncodeReply(reply)
	if err != nil {
		return nil, fmt.Errorf("tempest: reply of %s/%s: %w", kind, key, err)
	}
	return gw.ReplyJSON(b)
}

// TellJSON tells kind/key a message given as JSON (see AskJSON), with
// ctx as in TellContext.
func (n *Node) TellJSON(ctx context.Context, kind, key string, js []byte) error {
	if err := n.usable(ctx); err != nil {
		return err
	}
	_, msg, err := n.fromJSON(kind, key, js)
	if err != nil {
		return err
	}
	return n.TellContext(ctx, actor.Virtual(kind, key), msg)
}

// fromJSON checks the identity first, as Tell and Ask do, so that a bad
// key is refused alike whatever the body.
func (n *Node) fromJSON(kind, key string, js []byte) (*kindInfo, any, error) {
	if err := actor.CheckVirtual(kind, key); err != nil {
		return nil, nil, err
	}
	k := n.kind(kind)
	if k == nil {
		return nil, nil, fmt.Errorf("%w: %q", actor.ErrUnknownKind, kind)
	}
	gw := k.gw
	if gw == nil {
		return nil, nil, fmt.Errorf("%w: %q", ErrNoGateway, kind)
	}
	msg, err := gw.FromJSON(js)
	if err != nil {
		return nil, nil, &JSONError{Kind: kind, Type: gw.Input, Err: err}
	}
	return k, msg, nil
}
