package cluster

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tempest-actors/tempest/prospero/federation"
)

// Every sentinel of the federation's code table is answered with its own
// code, wrapped or not, and the caller's error matches it: ErrClosed
// also matches actor.ErrProcessUnavailable (NOT_SERVING, a lower code),
// and was answered NOT_SERVING, so a caller's errors.Is(err, ErrClosed)
// failed.
func TestEverySentinelIsAnsweredWithItsCode(t *testing.T) {
	for c := federation.CodeOther + 1; c.Valid(); c++ {
		for _, s := range fedCodes[c] {
			for _, err := range []error{s, fmt.Errorf("context: %w", s)} {
				r := fedCodes.Result(1, err)
				if r.Code != c {
					t.Errorf("%q answered %s, want %s", err, r.Code, c)
					continue
				}
				if got := fedCodes.Err(&r); !errors.Is(got, s) {
					t.Errorf("%q answered %s reads back as %v, which does not match it", err, c, got)
				}
			}
		}
	}
}
