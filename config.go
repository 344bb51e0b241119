package tempest

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/clock"
	"github.com/tempest-actors/tempest/internal/tracing"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/reminders"
)

// ErrInvalidConfig wraps every problem Config.Validate reports.
var ErrInvalidConfig = errors.New("tempest: invalid config")

// Config configures a Node. The zero value of each field means its default
// (see DefaultConfig), except DataDir, which is required. New calls
// Validate.
type Config struct {
	// Name is the node's unique, stable name. It names the node in the
	// cluster, in spawned actors' references and in logs. Default "local".
	Name string

	// DataDir holds the node's durable files: the state store of actors at
	// rest (state.db, a bbolt file) and, in a cluster, the raft log and
	// snapshots. Required; created if missing.
	DataDir string

	// Scheduler configures the local scheduler (ariel). Its Node field is
	// set from Name; Activator, Faults, Vet and Tracer are owned by the node and
	// must be nil; a nil Clock or Logger is taken from this Config.
	Scheduler ariel.Config

	// TracerProvider, when set, traces asks and tells with OpenTelemetry
	// (see docs/operations.md, "Tracing"): the ask or tell on the caller,
	// its send, and on the owner its admission, time queued, draining and
	// turn, with the W3C trace context carried across nodes in the
	// message's envelope. Nil (the default) traces nothing and costs
	// nothing. Sampling is the provider's: the node follows a sampled
	// parent and records nothing for one that is not. The agent builds one
	// from the OTEL_* environment variables. A build with the tag
	// tempest_notrace has no tracing code and refuses it.
	TracerProvider trace.TracerProvider

	// Supervisor configures the supervisor (prospero): MaxActive (active
	// actors before LRU passivation, 0 unbounded), HydrationBudget
	// (concurrent activations, default 64), IOWorkers and TickInterval.
	// Store is owned by the node and must be nil; Events is called after
	// the node's own sink (see Events below); a nil Clock or Logger is
	// taken from this Config.
	Supervisor prospero.Config

	// Reminders configures the durable reminder engine (package
	// reminders): MinPeriod, MaxPerIdentity, DeliveryTimeout, RetryAfter,
	// FlushInterval and Lateness (an observer of every tick's lateness,
	// for a histogram). Store, Codec, Deliver and ShardOf are owned by the
	// node and must be nil; a nil Clock or Logger is taken from this
	// Config.
	Reminders reminders.Config

	// Events, when set, receives every lifecycle decision of the
	// supervisor (activations, passivations, faults, restarts, ...). It is
	// called synchronously in decision order, possibly with the
	// supervisor's lock held: it must be fast, must not block and must not
	// call back into the node.
	Events func(prospero.Event)

	// Logger receives the node's logs. Activations and passivations are
	// logged at info with the stable keys LogKeyNode, LogKeyActor,
	// LogKeyIncarnation and LogKeyEpoch. Nil discards.
	Logger *slog.Logger

	// Clock is the time source of the node and the components it builds.
	// Nil means the wall clock (which is also the fake clock inside a
	// testing/synctest bubble).
	Clock Clock

	// CloseTimeout bounds a graceful Close whose context has no deadline.
	// Default 30 s (plus Cluster.LeaveTimeout in a cluster).
	CloseTimeout time.Duration

	// Cluster, when set, makes the node a member of a cluster (see
	// ClusterConfig). Nil: a standalone node that owns every actor.
	Cluster *ClusterConfig
}

// DefaultConfig returns the defaults (without a DataDir).
func DefaultConfig() Config {
	return Config{
		Name:         "local",
		Scheduler:    ariel.DefaultConfig(),
		Supervisor:   prospero.DefaultConfig(),
		CloseTimeout: 30 * time.Second,
	}
}

// Validate reports a configuration the node cannot run with. Zero fields
// are valid (they mean the default).
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.DataDir == "" {
		bad("DataDir is required")
	}
	if !validName(c.Name) {
		bad("Name %q: use letters, digits, '.', '-' and '_' only", c.Name)
	}
	if c.CloseTimeout < 0 {
		bad("negative CloseTimeout")
	}
	if c.Scheduler.Activator != nil || c.Scheduler.Faults != nil || c.Scheduler.Vet != nil || c.Scheduler.VetError != nil || c.Scheduler.Tracer != nil {
		bad("Scheduler.Activator, Scheduler.Faults, Scheduler.Vet, Scheduler.VetError and Scheduler.Tracer are set by the node (use TracerProvider)")
	}
	if c.TracerProvider != nil && !tracing.Built {
		bad("TracerProvider is set, but this build has no tracing (tag tempest_notrace)")
	}
	if c.Scheduler.Simulated {
		bad("the simulated scheduler is for tests of ariel, not for a node")
	}
	if err := c.Scheduler.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	if c.Supervisor.Store != nil {
		bad("Supervisor.Store is owned by the node")
	}
	rc := c.Reminders
	if rc.Store != nil || rc.Codec != nil || rc.Deliver != nil || rc.ShardOf != nil {
		bad("Reminders.Store, Codec, Deliver and ShardOf are owned by the node")
	}
	rc.Store, rc.Codec, rc.Deliver = prospero.NewMemStore(), noCodec{}, noDeliverer{}
	rc.ShardOf = func(prospero.Identity) string { return "" }
	if err := rc.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	sup := c.Supervisor
	sup.Store = prospero.NewMemStore() // Validate requires one; the node supplies it
	if err := sup.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidConfig, err))
	}
	if c.Cluster != nil {
		if err := c.Cluster.validate(); err != nil {
			errs = append(errs, err)
		}
		if c.Name == "" {
			bad("a cluster node needs a Name")
		}
	}
	return errors.Join(errs...)
}

func validName(s string) bool {
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
		default:
			return false
		}
	}
	return len(s) <= 128
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Cluster != nil {
		cc := *c.Cluster // validated now: the caller's later changes are not seen
		c.Cluster = &cc
	}
	if c.Name == "" {
		c.Name = d.Name
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = d.CloseTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = RealClock{}
	}
	s := c.Scheduler
	s.Node = c.Name
	ds := ariel.DefaultConfig()
	if s.Workers == 0 {
		s.Workers = ds.Workers
	}
	if s.MailboxCapacity == 0 {
		s.MailboxCapacity = ds.MailboxCapacity
	}
	if s.FairnessMessages == 0 {
		s.FairnessMessages = ds.FairnessMessages
	}
	if s.FairnessTime == 0 {
		s.FairnessTime = ds.FairnessTime
	}
	if s.TurnBudget == 0 {
		s.TurnBudget = ds.TurnBudget
	}
	if s.MaxReplacements == 0 {
		s.MaxReplacements = ds.MaxReplacements
	}
	if s.Clock == nil {
		s.Clock = c.Clock
	}
	if s.Logger == nil {
		s.Logger = c.Logger
	}
	c.Scheduler = s
	p := c.Supervisor
	if p.HydrationBudget == 0 {
		p.HydrationBudget = prospero.DefaultConfig().HydrationBudget
	}
	if p.Clock == nil {
		p.Clock = c.Clock
	}
	if p.Logger == nil {
		p.Logger = c.Logger
	}
	c.Supervisor = p
	return c
}

// Clock is the node's time source, the project's one (package clock): the
// node gives it to every component. Implementations must be safe for
// concurrent use.
type Clock = clock.Clock

// RealClock is the wall clock.
type RealClock = clock.Real
