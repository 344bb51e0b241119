package kinds

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/reminders"
	"github.com/tempest-actors/tempest/wire"
)

type ping struct{ N int }
type pong struct{ N int }

func codecOf[T any](tag uint32, name string) Codec {
	return Codec{
		Tag: tag, Name: name, Types: []reflect.Type{reflect.TypeFor[T]()},
		Marshal:   func(v any) ([]byte, error) { return fmt.Appendf(nil, "%d", reflect.ValueOf(v).Field(0).Int()), nil },
		Unmarshal: func(b []byte) (any, error) { var v T; return v, nil },
		Register: func(r *wire.Registry) error {
			return wire.RegisterCodec(r, tag, func(dst []byte, _ T) ([]byte, error) { return dst, nil },
				func([]byte) (T, error) { var v T; return v, nil })
		},
	}
}

// Check refuses what would make a tag or a Go type mean two things on
// the node, and accepts a message several kinds share.
func TestMessagesCheck(t *testing.T) {
	m := NewMessages()
	a := []Codec{codecOf[ping](1, "Ping")}
	if err := m.Check("a", a); err != nil {
		t.Fatal(err)
	}
	m.Add("a", a)
	for _, tc := range []struct {
		name string
		msgs []Codec
		ok   bool
	}{
		{"the same message in another kind", []Codec{codecOf[ping](1, "Ping")}, true},
		{"tag 0", []Codec{codecOf[pong](0, "Pong")}, false},
		{"tag above MaxTag", []Codec{codecOf[pong](MaxTag+1, "Pong")}, false},
		{"no codec", []Codec{{Tag: 2, Name: "Pong"}}, false},
		{"no name", []Codec{codecOf[pong](2, "")}, false},
		{"a type the wire refuses", []Codec{codecOf[any](2, "Any")}, false},
		{"a tag twice", []Codec{codecOf[pong](2, "Pong"), codecOf[ping](2, "Ping")}, false},
		{"another message under a taken tag", []Codec{codecOf[pong](1, "Pong")}, false},
		{"a taken Go type under another tag", []Codec{codecOf[ping](3, "Ping")}, false},
	} {
		err := m.Check("b", tc.msgs)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidKind)) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if r := m.ByName("a", "Ping"); r == nil || r.Kind != "a" || m.ByType(reflect.TypeFor[ping]()) != r || m.Len() != 1 {
		t.Fatalf("lookups: %+v, len %d", r, m.Len())
	}
}

// A reminder's payload is stored by tag, and only as a message of the
// reminder's own kind.
func TestMessagesReminderPayload(t *testing.T) {
	m := NewMessages()
	m.Add("a", []Codec{codecOf[ping](7, "Ping")})
	name, b, err := m.Encode("a", ping{N: 4})
	if err != nil || name != "7" || string(b) != "4" {
		t.Fatalf("Encode: %q %q %v", name, b, err)
	}
	if _, err := m.Decode("a", name, b); err != nil {
		t.Fatal(err)
	}
	// A message two kinds list is a payload of either.
	m.Add("b", []Codec{codecOf[ping](7, "Ping")})
	if name, _, err := m.Encode("b", ping{N: 1}); err != nil || name != "7" {
		t.Fatalf("the second kind listing the message: %q %v", name, err)
	}
	if _, err := m.Decode("b", "7", b); err != nil {
		t.Fatalf("decoded for the second kind: %v", err)
	}
	for _, err := range []error{
		func() error { _, _, err := m.Encode("other", ping{}); return err }(),
		func() error { _, _, err := m.Encode("a", pong{}); return err }(),
		func() error { _, err := m.Decode("other", name, b); return err }(),
		func() error { _, err := m.Decode("a", "x", b); return err }(),
	} {
		if !errors.Is(err, reminders.ErrUnknownPayload) {
			t.Errorf("got %v, want ErrUnknownPayload", err)
		}
	}
}

type valueErr struct{ s []string }

func (valueErr) Error() string { return "v" }

// An error code names one comparable sentinel, none of Tempest's own,
// under no reserved prefix.
func TestErrorsCheck(t *testing.T) {
	own := errors.New("own")
	app := errors.New("app")
	e := NewErrors([]Builtin{{Code: ReservedPrefix + "own", Err: own}})
	e.Add(map[string]error{"app.x": app})
	for _, tc := range []struct {
		name string
		errs map[string]error
		ok   bool
	}{
		{"the same pair again", map[string]error{"app.x": app}, true},
		{"empty code", map[string]error{"": errors.New("e")}, false},
		{"nil error", map[string]error{"app.y": nil}, false},
		{"not comparable", map[string]error{"app.y": valueErr{}}, false},
		{"reserved prefix", map[string]error{ReservedPrefix + "y": errors.New("e")}, false},
		{"a built-in sentinel", map[string]error{"app.own": own}, false},
		{"an actor sentinel", map[string]error{"app.refused": actor.ErrRefused}, false},
		{"a deadline sentinel", map[string]error{"app.deadline": actor.ErrDeadlineExceeded}, false},
		{"context's", map[string]error{"app.canceled": context.Canceled}, false},
		{"one wrapping an actor sentinel", map[string]error{"app.closed": fmt.Errorf("app: closed: %w", actor.ErrRefused)}, true},
		{"a taken code", map[string]error{"app.x": errors.New("e")}, false},
		{"a sentinel under another code", map[string]error{"app.z": app}, false},
	} {
		err := e.Check("k", tc.errs)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidKind)) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if c, ok := e.Code(fmt.Errorf("wrapped: %w", app)); !ok || c != "app.x" {
		t.Fatalf("Code: %q %v", c, ok)
	}
	if _, ok := e.Code(own); ok {
		t.Fatal("a built-in error has no application code")
	}
}
