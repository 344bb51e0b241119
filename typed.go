package tempest

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/tempest-actors/tempest/actor"
)

// ErrUnexpectedReply is matched by every *ReplyTypeError.
var ErrUnexpectedReply = errors.New("tempest: unexpected reply type")

// ReplyTypeError reports a reply that is not of the type AskAs expected.
type ReplyTypeError struct {
	Want reflect.Type
	Got  any // the reply
}

func (e *ReplyTypeError) Error() string {
	return fmt.Sprintf("tempest: reply is %T, want %v", e.Got, e.Want)
}

// Is reports ErrUnexpectedReply.
func (e *ReplyTypeError) Is(target error) bool { return target == ErrUnexpectedReply }

// AskAs is c.Ask with the reply typed: it returns the reply as an R, or
// the ask's error. A reply of type *R where R is a value type (or of type
// T where R is *T) is converted, so it does not matter whether the actor
// replied a value or a pointer, nor whether the reply came from another
// node (which delivers values). A reply of another type is a
// *ReplyTypeError; a nil reply is R's zero value for a pointer or
// interface R and a *ReplyTypeError otherwise.
//
//	b, err := tempest.AskAs[bank.Balance](ctx, node, ref, bank.GetBalance{})
func AskAs[R any](ctx context.Context, c actor.Client, to actor.Ref, msg any) (R, error) {
	reply, err := c.Ask(ctx, to, msg)
	if err != nil {
		var zero R
		return zero, err
	}
	return replyAs[R](reply)
}

func replyAs[R any](reply any) (R, error) {
	var zero R
	switch r := reply.(type) {
	case R:
		return r, nil
	case *R:
		if r != nil {
			return *r, nil
		}
	}
	want := reflect.TypeFor[R]()
	if reply == nil {
		if k := want.Kind(); k == reflect.Pointer || k == reflect.Interface {
			return zero, nil
		}
		return zero, &ReplyTypeError{Want: want, Got: reply}
	}
	if want.Kind() == reflect.Pointer {
		if rv := reflect.ValueOf(reply); rv.Type() == want.Elem() {
			p := reflect.New(rv.Type())
			p.Elem().Set(rv)
			return p.Interface().(R), nil
		}
	}
	return zero, &ReplyTypeError{Want: want, Got: reply}
}
