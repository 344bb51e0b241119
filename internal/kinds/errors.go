package kinds

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/tempest-actors/tempest/wire"
)

// ReservedPrefix starts the codes of Tempest's own errors.
const ReservedPrefix = "tempest."

// Builtin is one of Tempest's own error codes; late ones are registered
// after the kinds' errors.
type Builtin struct {
	Code string
	Err  error
	Late bool
}

// Errors maps application error codes to sentinels, beside Tempest's own
// (builtins). Written only before Start.
type Errors struct {
	// builtins are registered before the kinds' codes, the late ones
	// after: an error crosses with the code of the first it matches.
	builtins []Builtin
	codes    map[string]error
}

// NewErrors returns a table with builtins and no application codes.
func NewErrors(builtins []Builtin) *Errors {
	return &Errors{builtins: builtins, codes: map[string]error{}}
}

// Check reports why errs cannot be added for kind, without adding them.
func (t *Errors) Check(kind string, errs map[string]error) error {
	for _, code := range slices.Sorted(maps.Keys(errs)) {
		err := errs[code]
		switch {
		case code == "" || err == nil:
			return fmt.Errorf("%w %q: error code %q for %v: both must be set", ErrInvalidKind, kind, code, err)
		case !reflect.TypeOf(err).Comparable():
			return fmt.Errorf("%w %q: error code %q: %T is not comparable, so it cannot be a sentinel", ErrInvalidKind, kind, code, err)
		case strings.HasPrefix(code, ReservedPrefix):
			return fmt.Errorf("%w %q: error code %q: codes starting with %q are reserved", ErrInvalidKind, kind, code, ReservedPrefix)
		}
		if wire.IsBuiltinError(err) {
			return fmt.Errorf("%w %q: error code %q: %v is Tempest's own and keeps its identity across nodes already", ErrInvalidKind, kind, code, err)
		}
		for _, b := range t.builtins {
			if b.Err == err {
				return fmt.Errorf("%w %q: error code %q: %v is Tempest's own, with code %q", ErrInvalidKind, kind, code, err, b.Code)
			}
		}
		if old, ok := t.codes[code]; ok && old != err {
			return fmt.Errorf("%w %q: error code %q is %v in another kind", ErrInvalidKind, kind, code, old)
		}
		for c, e := range t.codes {
			if e == err && c != code {
				return fmt.Errorf("%w %q: error %v has code %q in another kind", ErrInvalidKind, kind, err, c)
			}
		}
		for c, e := range errs {
			if e == err && c != code {
				return fmt.Errorf("%w %q: error %v has two codes (%q, %q)", ErrInvalidKind, kind, err, c, code)
			}
		}
	}
	return nil
}

// Add adds errs (after Check).
func (t *Errors) Add(errs map[string]error) { maps.Copy(t.codes, errs) }

// Register gives r the built-in codes and the kinds'.
func (t *Errors) Register(r *wire.Registry) error {
	builtins := func(late bool) error {
		for _, b := range t.builtins {
			if b.Late != late {
				continue
			}
			if err := r.RegisterError(b.Code, b.Err); err != nil {
				return err
			}
		}
		return nil
	}
	if err := builtins(false); err != nil {
		return err
	}
	for _, code := range slices.Sorted(maps.Keys(t.codes)) {
		if err := r.RegisterError(code, t.codes[code]); err != nil {
			return err
		}
	}
	return builtins(true)
}

// Code returns the application code err matches (errors.Is), trying
// codes in sorted order; false when it matches none.
func (t *Errors) Code(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	for _, code := range slices.Sorted(maps.Keys(t.codes)) {
		if errors.Is(err, t.codes[code]) {
			return code, true
		}
	}
	return "", false
}
