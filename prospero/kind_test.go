package prospero_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/manifest"
	"github.com/tempest-actors/tempest/prospero"
)

func TestKindOptionsDefaults(t *testing.T) {
	got := prospero.KindOptions{}.WithDefaults()
	want := prospero.DefaultKindOptions()
	if got.MailboxDepth != 1024 || got.IdleTimeout != 10*time.Minute || got.TurnBudget != 0 ||
		got.Remedy != prospero.Restart || got.MaxRestarts != 3 || got.RestartPeriod != 5*time.Second {
		t.Fatalf("defaults: got %+v", got)
	}
	if got.BackoffInitial != want.BackoffInitial || got.BackoffMax != want.BackoffMax {
		t.Fatalf("back-off defaults: got %+v, want %+v", got, want)
	}
	if err := want.Validate(); err != nil {
		t.Fatalf("DefaultKindOptions invalid: %v", err)
	}
	// A maximum below the default ask timeout lowers the default to it.
	if got := (prospero.KindOptions{MaxAskTimeout: 400 * time.Millisecond}).WithDefaults(); got.AskTimeout != 400*time.Millisecond {
		t.Fatalf("AskTimeout with MaxAskTimeout 400ms: %v, want 400ms", got.AskTimeout)
	}
	kept := prospero.KindOptions{IdleTimeout: prospero.NeverIdle, MaxRestarts: 7}.WithDefaults()
	if kept.IdleTimeout != prospero.NeverIdle || kept.MaxRestarts != 7 {
		t.Fatalf("explicit values overwritten: %+v", kept)
	}
}

func TestKindOptionsValidate(t *testing.T) {
	for name, o := range map[string]prospero.KindOptions{
		"mailbox":               {MailboxDepth: -1},
		"idle":                  {IdleTimeout: -2 * time.Second},
		"budget":                {TurnBudget: -1},
		"remedy":                {Remedy: prospero.Hydrate + 1},
		"restarts":              {MaxRestarts: -1},
		"period":                {RestartPeriod: -1},
		"backoff":               {BackoffInitial: time.Second, BackoffMax: time.Millisecond},
		"persist mode":          {Persistence: prospero.Persistence{Mode: prospero.PersistPeriodic + 1}},
		"periodic zero":         {Persistence: prospero.Persistence{Mode: prospero.PersistPeriodic}},
		"turns, every turn":     {Persistence: prospero.Persistence{Mode: prospero.PersistEveryTurn, EveryTurns: 5}},
		"interval, passivation": {Persistence: prospero.Persistence{Mode: prospero.PersistOnPassivation, Every: time.Second}},
		"interval, none":        {Persistence: prospero.Persistence{Every: time.Second}},
		"clause":                {RequiredClauses: []manifest.ClauseID{manifest.Admission + 1}},
	} {
		if err := o.Validate(); !errors.Is(err, prospero.ErrInvalidKindOptions) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidKindOptions", name, err)
		}
	}
	ok := prospero.KindOptions{
		Persistence:     prospero.Persistence{Mode: prospero.PersistPeriodic, EveryTurns: 10},
		RequiredClauses: []manifest.ClauseID{manifest.ControlPlaneImmunity},
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid options rejected: %v", err)
	}
}

func TestRegistry(t *testing.T) {
	r := prospero.NewRegistry()
	k, err := r.Register("counter", prospero.KindOptions{IdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if k.Options.IdleTimeout != time.Minute || k.Options.MailboxDepth != 1024 {
		t.Fatalf("registered options: %+v", k.Options)
	}
	if _, err := r.Register("counter", prospero.KindOptions{}); !errors.Is(err, prospero.ErrKindExists) {
		t.Fatalf("duplicate: got %v", err)
	}
	if _, err := r.Register("a/b", prospero.KindOptions{}); !errors.Is(err, prospero.ErrInvalidIdentity) {
		t.Fatalf("bad name: got %v", err)
	}
	if _, err := r.Register("x", prospero.KindOptions{MailboxDepth: -1}); !errors.Is(err, prospero.ErrInvalidKindOptions) {
		t.Fatalf("bad options: got %v", err)
	}
	if got, err := r.Lookup("counter"); err != nil || got != k {
		t.Fatalf("Lookup: %v %v", got, err)
	}
	_, err = r.Lookup("nope")
	if !errors.Is(err, actor.ErrUnknownKind) || !errors.Is(err, prospero.ErrUnknownKind) {
		t.Fatalf("Lookup unknown: got %v, want ErrUnknownKind", err)
	}
	if names := r.Names(); len(names) != 1 || names[0] != "counter" {
		t.Fatalf("Names() = %v", names)
	}
}

// TestKindAskTimeoutsValidated: the deadline policy is checked, and its
// defaults are the documented ones.
func TestKindAskTimeoutsValidated(t *testing.T) {
	for _, o := range []prospero.KindOptions{
		{AskTimeout: -time.Second},
		{MaxAskTimeout: -time.Second},
		{AskTimeout: 2 * time.Second, MaxAskTimeout: time.Second},
		{AskTimeout: prospero.DefaultMaxAskTimeout + time.Second},
	} {
		if err := o.Validate(); !errors.Is(err, prospero.ErrInvalidKindOptions) {
			t.Errorf("%+v: %v", o, err)
		}
	}
	d := prospero.KindOptions{}.WithDefaults()
	if d.AskTimeout != actor.DefaultAskTimeout || d.MaxAskTimeout != prospero.DefaultMaxAskTimeout {
		t.Fatalf("defaults %v, %v", d.AskTimeout, d.MaxAskTimeout)
	}
}
