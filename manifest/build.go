package manifest

// Substrate names used in Assumed clauses.
const (
	SubstrateHosted    = "the OS scheduler and the Go runtime"
	SubstrateContainer = "the OS scheduler, the Go runtime and the container's CPU quota"
)

// Options are the facts a manifest is built from: the scheduler's
// configuration and the detected environment.
type Options struct {
	// Simulated is true when the deterministic simulated scheduler runs.
	Simulated bool
	// Env is the detected environment (see Detect).
	Env Environment
	// Capacities are the limits the node enforces; CPUQuota is filled
	// from Env.
	Capacities Capacities
}

// Build computes the manifest for o.
//
// Profile: Simulated when the simulated scheduler runs, Container inside
// a container, otherwise Hosted. Authority is always Sovereign.
//
// Clauses: TurnDiscipline, ControlPlaneImmunity and Admission are
// discharged by the scheduler itself (its turn watchdog, its supervision
// outside the worker pool, its bounded mailboxes). Fairness rests on the
// OS scheduler and the Go runtime when hosted or in a container, since
// the workers are goroutines on OS threads; the simulated scheduler is
// the only dispatcher of its actors and discharges it itself.
func Build(o Options) Manifest {
	m := Manifest{
		Authority:  Sovereign,
		Capacities: o.Capacities,
		Clauses: map[ClauseID]Discharge{
			TurnDiscipline:       Discharged,
			ControlPlaneImmunity: Discharged,
			Admission:            Discharged,
		},
	}
	m.Capacities.CPUQuota = o.Env.CPUQuota
	switch {
	case o.Simulated:
		m.Profile = Simulated
		m.Clauses[Fairness] = Discharged
	case o.Env.Container:
		m.Profile = Container
		m.Clauses[Fairness] = Assumed(SubstrateContainer)
	default:
		m.Profile = Hosted
		m.Clauses[Fairness] = Assumed(SubstrateHosted)
	}
	return m
}
